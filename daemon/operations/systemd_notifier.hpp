// Tells systemd how irisd is (Type=notify): READY=1 once it serves, WATCHDOG=1 from the progress
// loop's heartbeat (so a wedged data path, not only a dead process, gets irisd restarted under
// WatchdogSec=), STATUS= with what `systemctl status` shows, STOPPING=1 on the way down. Without
// NOTIFY_SOCKET (not started by systemd) every call does nothing.
#pragma once

#include <chrono>
#include <string>

namespace iris::daemon {

class SystemdNotifier {
 public:
  SystemdNotifier();

  bool active() const { return active_; }
  // How often beat() should come: half the watchdog period, or every 5 s for STATUS alone.
  std::chrono::milliseconds period() const { return period_; }

  void ready(const std::string& status) const;
  // WATCHDOG=1 when systemd watches, and the status line.
  void beat(const std::string& status) const;
  void stopping() const;

 private:
  void notify(const std::string& message) const;

  bool active_ = false;
  bool watchdog_ = false;
  std::chrono::milliseconds period_{5000};
};

}  // namespace iris::daemon
