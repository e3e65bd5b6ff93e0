#include "client/src/daemon_link.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "client/src/process_id.hpp"
#include "iris/error.hpp"

namespace iris {

namespace {
using Clock = std::chrono::steady_clock;
// An attach's timeout, added to the resume window for a call that waits for the next irisd.
constexpr auto kAttachTimeout = std::chrono::milliseconds(10000);
// Session calls on the attach connection: a GPU import in irisd can take a while.
constexpr auto kSessionCallTimeout = std::chrono::milliseconds(30000);
constexpr auto kResumeCheckEvery = std::chrono::milliseconds(100);
}  // namespace

DaemonLink::DaemonLink(net::Fd connection, net::Fd wake, std::chrono::milliseconds resume_window)
    : attach_fd_(std::move(connection)),
      wake_fd_(std::move(wake)),
      owner_pid_(current_pid()),
      resume_window_(resume_window) {}

bool DaemonLink::owned_here() const { return current_pid() == owner_pid_; }

void DaemonLink::check_owner() const {
  if (!owned_here())
    throw Error(ErrorCode::kInvalidArgument,
                "this iris::Client was attached by pid " + std::to_string(owner_pid_) +
                    "; this process (pid " + std::to_string(current_pid()) +
                    ") is a fork of it and must attach its own (iris::Client::connect)");
}

Clock::time_point deadline_after(std::chrono::nanoseconds timeout) {
  const auto now = Clock::now();
  if (timeout >= Clock::time_point::max() - now) return Clock::time_point::max();
  return now + std::chrono::duration_cast<Clock::duration>(timeout);
}

SessionLink::Clock::time_point DaemonLink::call_deadline() const {
  return deadline_after(resume_window_ + kAttachTimeout);
}

v1::SessionResponse DaemonLink::session_call(const v1::SessionRequest& request, const char* what,
                                             const std::vector<int>& fds,
                                             std::vector<net::Fd>* received, uint64_t* connection) {
  check_owner();
  const auto deadline = call_deadline();
  wait_while_resuming(deadline);
  for (;;) {
    uint64_t on = 0;
    try {
      auto response = *exchange(request, what, fds, received, &on, std::nullopt);
      if (connection != nullptr) *connection = on;
      return response;
    } catch (const Error& e) {
      // The connection broke under the call: if the session resumes, the call goes to the next
      // irisd (the previous one's answer, if it made one, died with it), and so on while irisd
      // keeps restarting within the deadline.
      if (e.code() != ErrorCode::kDaemonGone || !resumed_since(on, deadline)) throw;
    }
  }
}

v1::SessionResponse DaemonLink::resume_call(const v1::SessionRequest& request, const char* what,
                                            const std::vector<int>& fds,
                                            std::vector<net::Fd>* received) {
  return *exchange(request, what, fds, received, nullptr, std::nullopt);
}

std::optional<v1::SessionResponse> DaemonLink::call_on(uint64_t connection,
                                                       const v1::SessionRequest& request,
                                                       const char* what,
                                                       const std::vector<int>& fds) {
  return exchange(request, what, fds, nullptr, nullptr, connection);
}

bool DaemonLink::resumed_since(uint64_t connection, Clock::time_point deadline) {
  if (detached() || resume_window_.count() == 0) return false;
  // The watch may not have seen the hang-up yet.
  for (auto pause = std::chrono::milliseconds(1);
       up() && net::peer_closed(attach_fd_.get()) && Clock::now() < deadline;
       pause = std::min(pause * 2, std::chrono::milliseconds(20)))
    std::this_thread::sleep_for(pause);
  wait_while_resuming(deadline);
  // Only a session resumed since goes on: an irisd that is still there but did not answer may
  // have done what was asked.
  return up() && current_connection() != connection;
}

void DaemonLink::wait_while_resuming(Clock::time_point deadline) const {
  std::unique_lock lock(state_mutex_);
  while (state_.load(std::memory_order_acquire) == State::kResuming) {
    const auto now = Clock::now();
    if (now >= deadline) return;
    state_changed_.wait_for(lock, std::min<Clock::duration>(deadline - now, kResumeCheckEvery));
  }
}

std::optional<v1::SessionResponse> DaemonLink::exchange(
    const v1::SessionRequest& request, const char* what, const std::vector<int>& fds,
    std::vector<net::Fd>* received, uint64_t* connection, std::optional<uint64_t> only_on) {
  v1::SessionResponse response;
  {
    // One call at a time on the connection: each frame is answered by the next one.
    std::lock_guard lock(attach_mutex_);
    if (only_on && *only_on != connection_.load(std::memory_order_relaxed)) return std::nullopt;
    if (connection != nullptr) *connection = connection_.load(std::memory_order_relaxed);
    if (!attach_fd_ || !net::send_frame(attach_fd_.get(), request.SerializeAsString(), fds))
      throw Error(ErrorCode::kDaemonGone,
                  std::string(what) + ": irisd closed the session (stopped, or ended it)");
    auto frame = net::recv_frame(attach_fd_.get(), kSessionCallTimeout, 1);
    if (!frame || !response.ParseFromString(frame->payload))
      throw Error(ErrorCode::kDaemonGone,
                  std::string(what) + ": irisd did not answer (stopped, or the session ended)");
    if (received != nullptr) *received = std::move(frame->fds);
  }
  if (response.error_code() != 0)
    throw Error(static_cast<ErrorCode>(response.error_code()),
                std::string(what) + ": " + response.error_message());
  if (response.has_registered()) {
    // Past every id this session was given: a resume asks the next irisd to give none of them
    // again (a registration the resume dropped may still be named until its next lookup).
    const uint64_t next = response.registered().buffer_id() + 1;
    uint64_t seen = next_buffer_id_.load(std::memory_order_relaxed);
    while (next > seen && !next_buffer_id_.compare_exchange_weak(seen, next)) {
    }
  }
  return response;
}

void DaemonLink::throw_if_gone() const {
  if (!gone()) return;
  if (detached()) throw Error(ErrorCode::kDaemonGone, "this client has detached");
  std::lock_guard lock(state_mutex_);
  throw Error(ErrorCode::kDaemonGone, gone_why_);
}

void DaemonLink::wake_irisd() const {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t r = ::write(wake_fd_.get(), &one, sizeof(one));
}

void DaemonLink::begin_resume() {
  {
    std::lock_guard lock(state_mutex_);
    state_.store(State::kResuming, std::memory_order_release);
  }
  connection_left_ = connection_.load(std::memory_order_relaxed);
}

void DaemonLink::switch_to(const net::Fd& connection, const net::Fd& wake) {
  std::lock_guard calls(attach_mutex_);
  ::dup3(connection.get(), attach_fd_.get(), O_CLOEXEC);
  ::dup3(wake.get(), wake_fd_.get(), O_CLOEXEC);
  connection_.fetch_add(1, std::memory_order_release);
}

void DaemonLink::resumed() {
  {
    std::lock_guard lock(state_mutex_);
    state_.store(State::kUp, std::memory_order_release);
  }
  state_changed_.notify_all();
}

void DaemonLink::give_up(std::string why) {
  {
    std::lock_guard lock(state_mutex_);
    gone_why_ = std::move(why);
    state_.store(State::kGone, std::memory_order_release);
  }
  state_changed_.notify_all();
}

void DaemonLink::close() {
  detached_.store(true, std::memory_order_release);
  std::lock_guard calls(attach_mutex_);
  attach_fd_ = net::Fd();
}

}  // namespace iris
