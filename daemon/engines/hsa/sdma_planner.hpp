// Which SDMA engine runs each copy (hsa engine), as a pure function of the engines the runtime
// offers per agent pair and of the bytes already queued on each engine.
//
// ROCr runs a copy on an engine of its "copy agent": the source GPU, or the destination when the
// source is host memory. hsa_amd_memory_copy_engine_status reports, per (source, destination)
// pair, the engines free at that moment (not the ones wired to the pair: on an idle MI300X every
// peer is offered all 14 xGMI engines); irisd asks once at start-up, while idle, so the mask is
// the engines that can serve the pair at all. Which of them belong to the pair's link comes from
// KFD's topology (sysfs io_links' recommended_sdma_engine_id_mask, as ROCm/mori reads it), or
// from hsa_amd_memory_get_preferred_copy_engine where the runtime has it (ROCm 7.x). The planner
// only ever picks an engine the status offered (a queue on an engine it leaves out, such as a
// fused-off one on MI308X, can hang), prefers the recommended ones, and puts each copy on the
// least-loaded candidate, counting bytes queued but not finished across collectives, so that a
// collective's copies to different peers run on different links' engines in parallel. A copy of
// at least split_bytes is cut into one page-aligned piece per recommended engine; a pair without
// a recommendation is not split.
//
// Classes (EngineQueue, while tenants share the GPU): of a pair with two usable engines or more,
// the highest is kept for kLatency copies and kBulk copies use the others, so that a small
// collective never queues behind bulk pieces on an SDMA engine's ring; kAny uses them all.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "daemon/engines/engine.hpp"

namespace iris::daemon::hsa {

inline constexpr int kMaxEngines = 32;  // engine ids are bits of a 32-bit mask
inline constexpr int kHostAgent = -1;   // the CPU side of a pair (host memory)

// The engines of one (source, destination) pair, as bit masks of engine ids.
struct PairEngines {
  uint32_t available = 0;  // offered by the status query at start-up; 0: none (plain async copy)
  uint32_t preferred = 0;  // recommended for the pair's link; 0: no recommendation
};

// The engines a copy of this pair may run on: the recommended ones the status also offers, or
// every offered one when none of those is.
uint32_t usable_engines(const PairEngines& pair);

struct CopyShape {
  int src_device;  // kHostAgent for host memory
  int dst_device;
  uint64_t bytes;
  EngineQueue queue = EngineQueue::kAny;
};

// The engines of `usable` (usable_engines) that a copy of `queue` may run on.
uint32_t engines_for(uint32_t usable, EngineQueue queue);

struct PlannedPiece {
  std::size_t copy;  // index of the copy in the planned span
  uint64_t offset;   // piece = [offset, offset + bytes) of that copy
  uint64_t bytes;
  int copy_agent;   // the device whose engine runs it; kHostAgent for host-to-host copies
  uint32_t engine;  // one bit; 0 when the pair offers none (the runtime chooses)
};

class SdmaPlanner {
 public:
  using PairLookup = std::function<PairEngines(int src_device, int dst_device)>;

  // `devices` GPUs, numbered from 0; `split_bytes` 0 never splits.
  SdmaPlanner(int devices, PairLookup lookup, uint64_t split_bytes);

  // Assigns engines to `copies` and counts their bytes as queued. Pieces come out grouped by
  // copy, in the order the copies were given; valid until the next plan().
  const std::vector<PlannedPiece>& plan(std::span<const CopyShape> copies);
  // A piece finished (or was given up): its bytes leave its engine's queue.
  void finished(const PlannedPiece& piece);

  uint64_t queued_bytes(int device, int engine_index) const;
  uint32_t queued_pieces(int device, int engine_index) const;

 private:
  struct Load {
    uint64_t bytes = 0;
    uint32_t pieces = 0;
  };
  // The least-loaded engine in `mask` of `device`, skipping the bits in `taken`.
  int least_loaded(int device, uint32_t mask, uint32_t taken) const;

  PairLookup lookup_;
  uint64_t split_bytes_;
  std::vector<std::array<Load, kMaxEngines>> load_;  // per device, per engine index
  // plan()'s scratch and result, kept with their capacity.
  std::vector<std::size_t> order_;
  std::vector<PlannedPiece> by_size_;
  std::vector<std::size_t> first_piece_;
  std::vector<PlannedPiece> planned_;
};

}  // namespace iris::daemon::hsa
