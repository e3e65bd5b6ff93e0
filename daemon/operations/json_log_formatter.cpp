#include "daemon/operations/json_log_formatter.hpp"

#include <time.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include <spdlog/common.h>

namespace iris::daemon {

namespace {
std::string rfc3339(spdlog::log_clock::time_point t) {
  const auto micros =
      std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
  const time_t seconds = static_cast<time_t>(micros / 1000000);
  tm utc{};
  gmtime_r(&seconds, &utc);
  char buf[40];
  const std::size_t n = std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &utc);
  std::snprintf(buf + n, sizeof(buf) - n, ".%06lldZ", static_cast<long long>(micros % 1000000));
  return buf;
}
}  // namespace

void JsonLogFormatter::format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) {
  const auto level = spdlog::level::to_string_view(msg.level);
  nlohmann::ordered_json line = {
      {"time", rfc3339(msg.time)},
      {"level", std::string(level.data(), level.size())},
      {"logger", msg.logger_name.size() == 0
                     ? "irisd"
                     : std::string(msg.logger_name.data(), msg.logger_name.size())},
      {"thread", msg.thread_id},
      {"msg", std::string(msg.payload.data(), msg.payload.size())},
  };
  // Invalid UTF-8 (a client's bytes in a message) is replaced, never thrown on.
  const std::string text =
      line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  dest.append(text.data(), text.data() + text.size());
  dest.push_back('\n');
}

std::unique_ptr<spdlog::formatter> JsonLogFormatter::clone() const {
  return std::make_unique<JsonLogFormatter>();
}

}  // namespace iris::daemon
