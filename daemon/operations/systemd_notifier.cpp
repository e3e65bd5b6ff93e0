#include "daemon/operations/systemd_notifier.hpp"

#include <systemd/sd-daemon.h>

#include <cstdlib>

#include <spdlog/spdlog.h>

namespace iris::daemon {

SystemdNotifier::SystemdNotifier() {
  const char* socket = std::getenv("NOTIFY_SOCKET");
  active_ = socket != nullptr && socket[0] != '\0';
  uint64_t usec = 0;
  // The watchdog applies to this process only when WATCHDOG_PID is unset or names it.
  if (active_ && sd_watchdog_enabled(0, &usec) > 0 && usec > 0) {
    watchdog_ = true;
    period_ = std::chrono::milliseconds(std::max<uint64_t>(usec / 2000, 1));
    spdlog::info("systemd watchdog: {} ms; the progress loop pings every {} ms", usec / 1000,
                 period_.count());
  }
}

void SystemdNotifier::notify(const std::string& message) const {
  if (!active_) return;
  const int r = sd_notify(0, message.c_str());
  if (r < 0) spdlog::warn("sd_notify failed ({}): systemd may not see irisd's state", r);
}

void SystemdNotifier::ready(const std::string& status) const {
  notify("READY=1\nSTATUS=" + status);
}

void SystemdNotifier::beat(const std::string& status) const {
  notify((watchdog_ ? "WATCHDOG=1\nSTATUS=" : "STATUS=") + status);
}

void SystemdNotifier::stopping() const { notify("STOPPING=1\nSTATUS=stopping"); }

}  // namespace iris::daemon
