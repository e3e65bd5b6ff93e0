// Host memory holding one node's data for another: GPU data staged for UCX to send, arrivals
// landing from another node, and the copies a node keeps of what it sent until the receiving node
// has completed with it (kept_arrivals.hpp). Pinned for the engine, whole pages (what the GPU
// runtimes pin), and reused: pinning is a driver call each way (the CUDA engine's
// cuMemHostRegister and cuMemHostUnregister), which made a 64-byte collective across two nodes
// take 150-200 us on the cuda engine against 16-20 us on the host engine (H200 host, 16 cores).
// Released blocks stay pinned, by power-of-two size, up to a bound of bytes kept; past it they
// are unpinned and freed.
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
  // `max_cached_bytes`: pinned memory kept for reuse once released.
  StagingPool(Engine& engine, uint64_t max_cached_bytes);
  ~StagingPool();
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  // `bytes` of pinned host memory (a block of at least one page). Throws iris::Error
  // kLimitExceeded when the memory cannot be had, or the engine's error when it cannot be pinned.
  std::shared_ptr<StagedData> take(uint64_t bytes);

  // Blocks pinned so far, and bytes kept for reuse now: what tests and the pool's why-note rest on.
  uint64_t pinned_blocks() const;
  uint64_t cached_bytes() const;

 private:
  struct Block {
    std::byte* data = nullptr;
    uint64_t capacity = 0;
    std::shared_ptr<void> pin;
  };
  struct Shared;
  static void free_block(Block& block);

  std::shared_ptr<Shared> shared_;  // outlives the pool while any block is out
};

}  // namespace iris::daemon
