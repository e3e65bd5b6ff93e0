#include "daemon/operations/logging.hpp"

#include <spdlog/spdlog.h>

#include "daemon/operations/json_log_formatter.hpp"

namespace iris::daemon {

void configure_logging(const std::string& format, const std::string& level) {
  if (format == "json") {
    spdlog::set_formatter(std::make_unique<JsonLogFormatter>());
  } else {
    spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ [irisd] %v");
  }
  spdlog::set_level(spdlog::level::from_str(level));
}

}  // namespace iris::daemon
