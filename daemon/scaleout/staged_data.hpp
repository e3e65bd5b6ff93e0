// Host memory holding one node's data for another: GPU data staged for UCX to send, arrivals
// landing from another node, and the copies a node keeps of what it sent until the receiving node
// has completed with it (kept_arrivals.hpp). Pinned for the engine, whole pages (what the GPU
// runtimes pin).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "daemon/engines/engine.hpp"
#include "iris/error.hpp"

namespace iris::daemon {

struct StagedData {
  // Throws iris::Error when the memory cannot be had.
  StagedData(Engine& engine, uint64_t n) : bytes(n) {
    constexpr uint64_t kPage = 4096;
    const uint64_t size = std::max<uint64_t>(kPage, (n + kPage - 1) / kPage * kPage);
    data = static_cast<std::byte*>(std::aligned_alloc(kPage, size));
    if (data == nullptr)
      throw Error(ErrorCode::kLimitExceeded, "cannot allocate " + std::to_string(size) +
                                                 " bytes to stage another node's data");
    try {
      pin = engine.prepare_host_memory(data, size);
    } catch (...) {
      std::free(data);
      throw;
    }
  }
  ~StagedData() {
    pin.reset();  // unpinned before it is freed
    std::free(data);
  }
  StagedData(const StagedData&) = delete;
  StagedData& operator=(const StagedData&) = delete;

  uint64_t bytes;
  std::byte* data = nullptr;
  std::shared_ptr<void> pin;
};

}  // namespace iris::daemon
