#include <spdlog/spdlog.h>

#include <stdexcept>

#include "daemon/engines/engine.hpp"
#include "daemon/engines/host/host_engine.hpp"
#ifdef IRIS_HAVE_CUDA
#include "daemon/engines/cuda/cuda_engine.hpp"
#endif

namespace iris::daemon {

ImportedMemory Engine::import_device_memory(const DeviceBufferExport&) {
  throw Error(ErrorCode::kInvalidArgument,
              "the '" + description().name +
                  "' engine cannot use GPU buffers: run irisd with --engine cuda on a GPU node");
}

void Engine::write_device_word(int, std::byte*, uint32_t) {
  throw Error(ErrorCode::kInternal, "the '" + description().name + "' engine has no GPU memory");
}

std::unique_ptr<Engine> make_engine(const EngineOptions& options) {
  if (options.kind == "host")
    return std::make_unique<HostEngine>(options, "requested with --engine host");
#ifdef IRIS_HAVE_CUDA
  std::string why_not;
  if (options.kind == "cuda" || options.kind == "auto") {
    auto engine =
        CudaEngine::create(options,
                           options.kind == "cuda" ? "requested with --engine cuda"
                                                  : "auto: an NVIDIA GPU and driver are present",
                           why_not);
    if (engine) return engine;
    if (options.kind == "cuda") throw std::runtime_error("--engine cuda: " + why_not);
    spdlog::info("engine auto: cuda unavailable: {}", why_not);
    return std::make_unique<HostEngine>(options, "auto: cuda unavailable (" + why_not + ")");
  }
#else
  if (options.kind == "cuda")
    throw std::runtime_error("--engine cuda: this irisd was built without the CUDA toolkit");
  if (options.kind == "auto")
    return std::make_unique<HostEngine>(options, "auto: this irisd was built without GPU backends");
#endif
  throw std::runtime_error("unknown engine '" + options.kind +
                           "': irisd supports --engine auto|cuda|host");
}

}  // namespace iris::daemon
