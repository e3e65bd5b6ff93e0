// Host memory holding one node's data for another: GPU data staged for UCX to send, arrivals
// landing from another node, and the copies a node keeps of what it sent until the receiving node
// has completed with it (kept_arrivals.hpp). Pinned for the engine, whole pages (what the GPU
// runtimes pin), and reused: pinning is a driver call each way (the CUDA engine's
// cuMemHostRegister and cuMemHostUnregister), which made a small collective across two nodes
// several times slower on the cuda engine than on the host engine (`scripts/bench-scale-out.sh`;
// docs/PERFORMANCE-HISTORY.md, "Across nodes: like for like, and the cuda engine's staging").
// Blocks come in power-of-two sizes; a miss pins a slab of its size's blocks at once (up to
// 256 KiB), and released blocks stay pinned for reuse up to a bound of bytes kept. A slab is
// unpinned and freed with the last of its blocks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "daemon/engines/engine.hpp"

namespace iris::daemon {

// One block's use: `bytes` of `data` (the block may be larger). It goes back to its pool when
// the last owner lets go, from any thread (an engine's worker may hold the last reference).
struct StagedData {
  std::byte* data = nullptr;
  uint64_t bytes = 0;
};

class StagingPool {
 public:
  // `max_cached_bytes`: released blocks kept pinned for reuse up to this many bytes (a new slab's
  // spare blocks are kept whatever the bound).
  StagingPool(Engine& engine, uint64_t max_cached_bytes);
  ~StagingPool();
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  // `bytes` of pinned host memory (a block of at least one page). Throws iris::Error
  // kLimitExceeded when the memory cannot be had, or the engine's error when it cannot be pinned.
  std::shared_ptr<StagedData> take(uint64_t bytes);

  // Pin calls so far (one per slab), and bytes kept for reuse now.
  uint64_t pins() const;
  uint64_t cached_bytes() const;

 private:
  struct Slab;
  struct Block {
    std::byte* data = nullptr;
    uint64_t capacity = 0;
    std::shared_ptr<Slab> slab;  // null: none taken
  };
  struct Shared;
  // A new slab of `capacity`-byte blocks, pinned. Throws iris::Error.
  std::vector<Block> pin_slab(uint64_t capacity);

  std::shared_ptr<Shared> shared_;  // outlives the pool while any block is out
};

}  // namespace iris::daemon
