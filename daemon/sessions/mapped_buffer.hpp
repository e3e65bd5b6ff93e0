// A buffer the daemon can copy from and to: where it is mapped in irisd, how big it is, and the
// mapping's owner. Copies in flight hold a shared_ptr, so a session that dies mid-collective
// keeps its mappings alive until the engine is done with them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace iris::daemon {

struct MappedBuffer {
  uint64_t id;
  uint64_t session_id;
  std::byte* base;
  uint64_t bytes;
  std::shared_ptr<void> mapping;  // keeps `base` valid (a shared-memory mapping, an IPC import)
  int device = -1;                // engine device index; -1 (kHostMemory) for host memory
};

}  // namespace iris::daemon
