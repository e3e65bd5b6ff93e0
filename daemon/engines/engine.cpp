// The Engine interface's shared parts: the defaults of engines that import no GPU memory, and
// the checks every GPU engine runs on what a client exported before it opens anything.
#include "daemon/engines/engine.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "iris/error.hpp"
#include "iris/shared/checked_range.hpp"

namespace iris::daemon {

void check_export_range(const DeviceBufferExport& exported, uint64_t size, const char* what) {
  if (!range_within(exported.offset, exported.bytes, size))
    throw Error(ErrorCode::kOutOfRange, "range [" + std::to_string(exported.offset) + ", +" +
                                            std::to_string(exported.bytes) + ") lies outside " +
                                            what + " of " + std::to_string(size) + " bytes");
}

uint64_t check_vmm_export(const DeviceBufferExport& exported) {
  const auto& chunks = exported.vmm_chunk_bytes;
  if (chunks.size() != exported.vmm_fds.size())
    throw Error(ErrorCode::kInvalidArgument,
                std::to_string(exported.vmm_fds.size()) + " file descriptors for " +
                    std::to_string(chunks.size()) + " VMM allocations");
  uint64_t total = 0;
  for (uint64_t bytes : chunks) {
    const auto sum = checked_add(total, bytes);
    if (bytes == 0 || !sum)
      throw Error(ErrorCode::kInvalidArgument, "VMM allocation sizes are zero or overflow");
    total = *sum;
  }
  check_export_range(exported, total, "the VMM allocations");
  return total;
}

ImportedMemory Engine::import_device_memory(const DeviceBufferExport&) {
  throw Error(ErrorCode::kInvalidArgument,
              "the '" + description().name +
                  "' engine cannot use GPU buffers: run irisd with --engine hsa (AMD) or "
                  "--engine cuda (NVIDIA) on a GPU node");
}

uint64_t Engine::copy_now_share(uint64_t total) const {
  if (total <= copy_now_budget_) return total;
  return std::min(copy_now_budget_, total / (uint64_t{copy_now_helpers_} + 1));
}

void Engine::copy_now(std::span<const HostCopy> copies) {
  for (const HostCopy& copy : copies)
    if (copy.bytes != 0) std::memcpy(copy.dst, copy.src, copy.bytes);
}

void Engine::write_device_word(int, std::byte*, uint32_t) {
  throw Error(ErrorCode::kInternal, "the '" + description().name + "' engine has no GPU memory");
}

}  // namespace iris::daemon
