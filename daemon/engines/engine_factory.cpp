#include <stdexcept>

#include "daemon/engines/engine.hpp"
#include "daemon/engines/host/host_engine.hpp"

namespace iris::daemon {

std::unique_ptr<Engine> make_engine(const EngineOptions& options) {
  if (options.kind == "host")
    return std::make_unique<HostEngine>(options, "requested with --engine host");
  if (options.kind == "auto")
    return std::make_unique<HostEngine>(
        options, "auto: this build has no GPU backend (cuda and hsa come in later releases)");
  throw std::runtime_error("unknown engine '" + options.kind +
                           "': this build supports --engine auto|host");
}

}  // namespace iris::daemon
