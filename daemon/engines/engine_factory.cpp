// make_engine: --engine's choice as one table of GPU backends, tried in order under `auto` (AMD,
// then NVIDIA), each saying why it cannot start; the host engine when none can.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <stdexcept>

#include "daemon/engines/engine.hpp"
#include "daemon/engines/host/host_engine.hpp"
#ifdef IRIS_HAVE_CUDA
#include "daemon/engines/cuda/cuda_engine.hpp"
#endif
#ifdef IRIS_HAVE_HSA
#include "daemon/engines/hsa/hsa_engine.hpp"
#endif

namespace iris::daemon {

namespace {

// One GPU backend: what `auto` found when it starts it, and how to start it (null when this
// irisd was built without it, `missing` then saying so).
struct Backend {
  const char* kind;
  const char* present;
  const char* missing;
  std::unique_ptr<Engine> (*create)(const EngineOptions&, const std::string& reason,
                                    std::string& why_not);
};

template <class E>
std::unique_ptr<Engine> create_engine(const EngineOptions& options, const std::string& reason,
                                      std::string& why_not) {
  return E::create(options, reason, why_not);
}

constexpr std::array kBackends{
    Backend{"hsa", "an AMD GPU and the ROCm runtime are present",
            "this irisd was built without ROCm's HSA and HIP headers",
#ifdef IRIS_HAVE_HSA
            &create_engine<HsaEngine>
#else
            nullptr
#endif
    },
    Backend{"cuda", "an NVIDIA GPU and driver are present",
            "this irisd was built without the CUDA toolkit",
#ifdef IRIS_HAVE_CUDA
            &create_engine<CudaEngine>
#else
            nullptr
#endif
    },
};

}  // namespace

std::unique_ptr<Engine> make_engine(const EngineOptions& options) {
  if (options.kind == "host")
    return std::make_unique<HostEngine>(options, "requested with --engine host");
  const bool known = options.kind == "auto" ||
                     std::any_of(kBackends.begin(), kBackends.end(),
                                 [&](const Backend& b) { return options.kind == b.kind; });
  if (!known)
    throw std::runtime_error("unknown engine '" + options.kind +
                             "': irisd supports --engine auto|hsa|cuda|host");
  std::string skipped;
  for (const Backend& backend : kBackends) {
    if (options.kind != "auto" && options.kind != backend.kind) continue;
    std::string why_not = backend.missing;
    if (backend.create != nullptr) {
      const std::string reason =
          options.kind == backend.kind
              ? "requested with --engine " + options.kind
              : "auto: " + std::string(backend.present) + (skipped.empty() ? "" : "; " + skipped);
      why_not.clear();
      if (auto engine = backend.create(options, reason, why_not)) return engine;
    }
    if (options.kind == backend.kind)
      throw std::runtime_error("--engine " + options.kind + ": " + why_not);
    spdlog::info("engine auto: {} unavailable: {}", backend.kind, why_not);
    skipped += (skipped.empty() ? "" : "; ") + std::string(backend.kind) + " unavailable (" +
               why_not + ")";
  }
  return std::make_unique<HostEngine>(options, "auto: " + skipped);
}

}  // namespace iris::daemon
