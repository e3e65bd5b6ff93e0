// irisd: see README.md and docs/ARCHITECTURE.md.
#include <signal.h>

#include <google/protobuf/stubs/logging.h>
#include <spdlog/spdlog.h>

#include "daemon/daemon.hpp"
#include "daemon/operations/logging.hpp"

namespace {

// SIGHUP (`systemctl reload irisd`): the log level is read again from the config file; other
// settings take effect at the next start.
void reload(int argc, char** argv, iris::daemon::Config& running) {
  int exit_code = 0;
  auto fresh = iris::daemon::parse_config(argc, argv, exit_code);
  if (!fresh) {
    spdlog::error(
        "SIGHUP: the configuration does not parse (the message above says why); "
        "keeping log level {}",
        running.log_level);
    return;
  }
  if (fresh->log_level != running.log_level) {
    spdlog::set_level(spdlog::level::from_str(fresh->log_level));
    spdlog::warn("SIGHUP: log level {} -> {}", running.log_level, fresh->log_level);
    running.log_level = fresh->log_level;
  } else {
    spdlog::info("SIGHUP: log level stays {}", running.log_level);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int exit_code = 0;
  auto config = iris::daemon::parse_config(argc, argv, exit_code);
  if (!config) return exit_code;
  iris::daemon::configure_logging(config->log_format, config->log_level);
  // protobuf logs every malformed string a client sends (invalid UTF-8 in a key, say) on stderr:
  // a tenant could flood the journal. Those messages are the client's error, already answered.
  google::protobuf::SetLogHandler(
      [](google::protobuf::LogLevel level, const char* file, int line, const std::string& message) {
        if (level >= google::protobuf::LOGLEVEL_FATAL)
          spdlog::critical("protobuf: {}", message);
        else
          spdlog::debug("protobuf {}:{}: {}", file, line, message);
      });

  // Every thread inherits this mask, so the signals reach only sigwait below.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);

  iris::daemon::Config running = *config;
  iris::daemon::Daemon daemon(std::move(*config));
  try {
    daemon.start();
  } catch (const std::exception& e) {
    spdlog::critical("cannot start: {}", e.what());
    return 1;
  }
  int sig = 0;
  for (;;) {
    if (sigwait(&set, &sig) != 0) continue;
    if (sig != SIGHUP) break;
    reload(argc, argv, running);
  }
  spdlog::info("received {}, shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  daemon.shutdown();
  spdlog::info("stopped");
  return 0;
}
