// irisd's log output: spdlog on stderr (the journal under systemd), as text or JSON lines.
#pragma once

#include <string>

namespace iris::daemon {

// `format`: "text" or "json"; `level`: trace | debug | info | warn | error.
void configure_logging(const std::string& format, const std::string& level);

}  // namespace iris::daemon
