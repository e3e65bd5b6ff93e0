// `--log-format json`: one JSON object per line for log collectors (Loki, Fluent Bit, Vector):
// {"time": RFC 3339 UTC with microseconds, "level", "logger", "thread", "msg"}. The message is
// escaped by nlohmann::json, so a client-chosen string (a communicator key, a client name) can
// never break the line or forge a field.
#pragma once

#include <spdlog/formatter.h>

#include <memory>

namespace iris::daemon {

class JsonLogFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override;
  std::unique_ptr<spdlog::formatter> clone() const override;
};

}  // namespace iris::daemon
