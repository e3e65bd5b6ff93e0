// Runs part of a test as another user, the way an attacker sharing the node would: a forked child
// that drops to `uid` (and its group) before `body` runs, killed by an alarm if it hangs. Needs
// root; callers skip without it.
#pragma once

#include <grp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <poll.h>

#include <cstdio>
#include <functional>

namespace iris::testing {

inline constexpr uid_t kNobody = 65534;

// `body`'s return value as the child's exit code; 128 + signal when it died, 127 when it could
// not drop privileges. `uid` may be the caller's own (the child then keeps its identity).
inline int run_as_uid(uid_t uid, const std::function<int()>& body, unsigned timeout_s = 60) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::alarm(timeout_s);
    if (uid != ::getuid() &&
        (::setgroups(0, nullptr) != 0 || ::setgid(uid) != 0 || ::setuid(uid) != 0))
      ::_exit(127);
    const int code = body();
    std::fflush(nullptr);  // _exit skips stdio's buffers
    ::_exit(code);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// A one-shot signal between a test and a child it forked (which may run as another user, so it
// cannot use files in the test's directory): notify() in one, wait() in the other.
class ForkSignal {
 public:
  ForkSignal() {
    if (::pipe(fds_) != 0) fds_[0] = fds_[1] = -1;
  }
  ~ForkSignal() {
    ::close(fds_[0]);
    ::close(fds_[1]);
  }
  ForkSignal(const ForkSignal&) = delete;
  ForkSignal& operator=(const ForkSignal&) = delete;
  void notify() { [[maybe_unused]] auto r = ::write(fds_[1], "1", 1); }
  // True once notified; false after `timeout_ms` (a bound against hanging).
  bool wait(int timeout_ms) {
    pollfd p{fds_[0], POLLIN, 0};
    return ::poll(&p, 1, timeout_ms) == 1;
  }

 private:
  int fds_[2];
};

}  // namespace iris::testing
