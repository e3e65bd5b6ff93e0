#include "daemon/progress_loop.hpp"

#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <spdlog/spdlog.h>

namespace iris::daemon {

namespace {
constexpr auto kPureSpin = std::chrono::microseconds(2);

void drain_eventfd(int fd) {
  uint64_t counter;
  [[maybe_unused]] ssize_t r = ::read(fd, &counter, sizeof(counter));
}
}  // namespace

ProgressLoop::ProgressLoop(std::chrono::microseconds spin)
    : spin_(spin),
      epoll_fd_(::epoll_create1(EPOLL_CLOEXEC)),
      command_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  if (!epoll_fd_ || !command_fd_)
    throw std::runtime_error(std::string("progress loop: ") + std::strerror(errno));
  watch(command_fd_.get());
}

ProgressLoop::~ProgressLoop() { stop(); }

void ProgressLoop::set_heartbeat(std::chrono::milliseconds period, std::function<void()> beat) {
  beat_period_ = std::min(period, std::chrono::milliseconds(1000));
  beat_ = std::move(beat);
}

void ProgressLoop::add_poller(Poller& poller) { pollers_.push_back(&poller); }

void ProgressLoop::start() {
  thread_ = std::thread([this] { run(); });
}

void ProgressLoop::stop() {
  if (!thread_.joinable()) return;
  stop_requested_.store(true);
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t r = ::write(command_fd_.get(), &one, sizeof(one));
  thread_.join();
}

void ProgressLoop::watch(int fd) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, fd, &ev) != 0)
    spdlog::error("epoll_ctl add fd {}: {}", fd, std::strerror(errno));
}

void ProgressLoop::unwatch(int fd) { ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, fd, nullptr); }

bool ProgressLoop::post(std::function<void()> f) {
  {
    std::lock_guard lock(commands_mutex_);
    if (!accepting_) return false;
    commands_.push_back(std::move(f));
    commands_pending_.store(true, std::memory_order_release);
  }
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t r = ::write(command_fd_.get(), &one, sizeof(one));
  return true;
}

void ProgressLoop::run_commands() {
  std::deque<std::function<void()>> batch;
  {
    std::lock_guard lock(commands_mutex_);
    batch.swap(commands_);
    commands_pending_.store(false, std::memory_order_relaxed);
  }
  for (auto& f : batch) f();
}

bool ProgressLoop::poll_once() {
  bool worked = false;
  for (Poller* p : pollers_) worked = p->poll() || worked;
  return worked;
}

bool ProgressLoop::enter_sleep() {
  // Every poller arms its wake-ups even after one refused: exit_sleep() disarms them all.
  bool may_sleep = true;
  for (Poller* p : pollers_) may_sleep = p->try_enter_sleep() && may_sleep;
  return may_sleep;
}

void ProgressLoop::exit_sleep() {
  for (Poller* p : pollers_) p->exit_sleep();
}

void ProgressLoop::run() {
  using clock = std::chrono::steady_clock;
  auto last_work = clock::now();
  auto last_beat = last_work;
  const int sleep_ms = static_cast<int>(beat_period_.count());
  epoll_event events[64];
  while (!stop_requested_.load(std::memory_order_relaxed)) {
    if (commands_pending_.load(std::memory_order_acquire)) run_commands();
    const bool worked = poll_once();
    const auto now = clock::now();
    if (beat_ && now - last_beat >= beat_period_) {
      last_beat = now;
      beat_();
    }
    if (worked) {
      last_work = now;
      continue;
    }
    const auto idle = now - last_work;
    if (idle < spin_) {
      // A brief pure spin catches back-to-back work; after it, each turn gives the core away,
      // so that engine workers and ranks sharing it run while we wait.
      if (idle < kPureSpin) {
        cpu_relax();
      } else {
        sched_yield();
      }
      continue;
    }
    if (!enter_sleep() || commands_pending_.load(std::memory_order_acquire)) {
      exit_sleep();
      sched_yield();
      continue;
    }
    const int n = ::epoll_wait(epoll_fd_.get(), events, 64, sleep_ms);
    exit_sleep();
    for (int i = 0; i < n; ++i) {
      drain_eventfd(events[i].data.fd);
    }
    // A wake-up for something spins as after work; one for the heartbeat alone polls once and
    // sleeps again (spinning after each, an idle irisd used 0.4% of a core).
    if (n > 0) last_work = clock::now();
  }
  {
    std::lock_guard lock(commands_mutex_);
    accepting_ = false;
  }
  run_commands();
}

}  // namespace iris::daemon
