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
