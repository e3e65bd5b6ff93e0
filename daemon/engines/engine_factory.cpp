#include <spdlog/spdlog.h>

#include <stdexcept>

#include "daemon/engines/engine.hpp"
#include "daemon/engines/host/host_engine.hpp"
#include "iris/shared/checked_range.hpp"
#ifdef IRIS_HAVE_CUDA
#include "daemon/engines/cuda/cuda_engine.hpp"
#endif
#ifdef IRIS_HAVE_HSA
#include "daemon/engines/hsa/hsa_engine.hpp"
#endif

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

void Engine::write_device_word(int, std::byte*, uint32_t) {
  throw Error(ErrorCode::kInternal, "the '" + description().name + "' engine has no GPU memory");
}

std::unique_ptr<Engine> make_engine(const EngineOptions& options) {
  if (options.kind == "host")
    return std::make_unique<HostEngine>(options, "requested with --engine host");
  if (options.kind != "auto" && options.kind != "hsa" && options.kind != "cuda")
    throw std::runtime_error("unknown engine '" + options.kind +
                             "': irisd supports --engine auto|hsa|cuda|host");
  // auto: hsa, then cuda, then host; each backend that cannot start says why.
  std::string skipped;
  auto unavailable = [&](const std::string& kind, const std::string& why) {
    if (options.kind == kind) throw std::runtime_error("--engine " + kind + ": " + why);
    spdlog::info("engine auto: {} unavailable: {}", kind, why);
    skipped += (skipped.empty() ? "" : "; ") + kind + " unavailable (" + why + ")";
  };
  const auto requested = [&](const std::string& kind, const char* present) {
    return options.kind == kind
               ? "requested with --engine " + kind
               : "auto: " + std::string(present) + (skipped.empty() ? "" : "; " + skipped);
  };
  if (options.kind == "auto" || options.kind == "hsa") {
#ifdef IRIS_HAVE_HSA
    std::string why_not;
    if (auto engine = HsaEngine::create(
            options, requested("hsa", "an AMD GPU and the ROCm runtime are present"), why_not))
      return engine;
    unavailable("hsa", why_not);
#else
    unavailable("hsa", "this irisd was built without ROCm's HSA and HIP headers");
#endif
  }
  if (options.kind == "auto" || options.kind == "cuda") {
#ifdef IRIS_HAVE_CUDA
    std::string why_not;
    if (auto engine = CudaEngine::create(
            options, requested("cuda", "an NVIDIA GPU and driver are present"), why_not))
      return engine;
    unavailable("cuda", why_not);
#else
    unavailable("cuda", "this irisd was built without the CUDA toolkit");
#endif
  }
  return std::make_unique<HostEngine>(options, "auto: " + skipped);
}

}  // namespace iris::daemon
