#include "client/src/daemon_watch.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "client/src/process_id.hpp"
#include "iris/error.hpp"

namespace iris {

DaemonWatch::DaemonWatch(int connection, OnHangup on_hangup, std::function<void()> while_gone,
                         std::function<void()> tend)
    : on_hangup_(std::move(on_hangup)),
      while_gone_(std::move(while_gone)),
      tend_(std::move(tend)),
      stop_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      owner_(current_pid()) {
  if (!stop_fd_)
    throw Error(ErrorCode::kInternal,
                std::string("eventfd for the daemon watch: ") + std::strerror(errno));
  thread_ = std::make_unique<std::thread>([this, connection] { run(connection); });
}

DaemonWatch::~DaemonWatch() { stop(); }

void DaemonWatch::stop() {
  if (!thread_) return;
  if (current_pid() != owner_) {
    // fork() copied this object but not the thread: nothing to join.
    (void)thread_.release();
    return;
  }
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t r = ::write(stop_fd_.get(), &one, sizeof(one));
  thread_->join();
  thread_.reset();
}

bool DaemonWatch::pause(std::chrono::milliseconds duration) {
  pollfd stop{stop_fd_.get(), POLLIN, 0};
  const int n = ::poll(&stop, 1, static_cast<int>(duration.count()));
  return n == 0 || (n < 0 && errno == EINTR);
}

void DaemonWatch::run(int connection) {
  // POLLRDHUP without POLLIN: an answer waiting to be read does not wake this thread.
  pollfd fds[2] = {{connection, POLLRDHUP, 0}, {stop_fd_.get(), POLLIN, 0}};
  for (;;) {
    const bool tending = tending_.load(std::memory_order_acquire);
    const int n = ::poll(fds, 2, tending ? kWhileGoneEveryMs : -1);
    if (n == 0 && tending) tend_();
    if (n <= 0 && (n == 0 || errno == EINTR)) continue;
    if (n < 0 || fds[1].revents != 0) return;
    if ((fds[0].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) == 0) continue;
    const int next = on_hangup_(*this);
    if (next < 0) break;
    fds[0] = {next, POLLRDHUP, 0};
  }
  for (;;) {
    const int n = ::poll(&fds[1], 1, kWhileGoneEveryMs);
    if (n > 0 || (n < 0 && errno != EINTR)) return;  // stopped
    while_gone_();
  }
}

}  // namespace iris
