// irisd: see README.md and docs/ARCHITECTURE.md.
#include <signal.h>

#include <google/protobuf/stubs/logging.h>
#include <spdlog/spdlog.h>

#include "daemon/daemon.hpp"

int main(int argc, char** argv) {
  int exit_code = 0;
  auto config = iris::daemon::parse_config(argc, argv, exit_code);
  if (!config) return exit_code;
  spdlog::set_level(spdlog::level::from_str(config->log_level));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ [irisd] %v");
  // protobuf logs every malformed string a client sends (invalid UTF-8 in a key, say) on stderr:
  // a tenant could flood the journal. Those messages are the client's error, already answered.
  google::protobuf::SetLogHandler(
      [](google::protobuf::LogLevel level, const char* file, int line, const std::string& message) {
        if (level >= google::protobuf::LOGLEVEL_FATAL)
          spdlog::critical("protobuf: {}", message);
        else
          spdlog::debug("protobuf {}:{}: {}", file, line, message);
      });

  // Every thread inherits this mask, so the signals reach only sigwait in main.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);

  iris::daemon::Daemon daemon(std::move(*config));
  try {
    daemon.start();
  } catch (const std::exception& e) {
    spdlog::critical("cannot start: {}", e.what());
    return 1;
  }
  daemon.wait_for_signal();
  daemon.shutdown();
  spdlog::info("stopped");
  return 0;
}
