// The session's link to irisd: the attach connection, its one-call-at-a-time lock, and which
// irisd it leads to now. Every session call goes through here, so "which irisd answered this
// call" is decided once: each resume advances the connection count, and a call that broke under
// a restart goes to the next irisd (session_call) or to none (call_on). The resume itself
// (Client::Impl::reattach, on the daemon watch's thread) drives the state: up, resuming, gone.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>

#include "client/src/session_link.hpp"

namespace iris {

class DaemonLink final : public SessionLink {
 public:
  // `connection` and `wake` as attach gave them; the process that attached is the owner.
  DaemonLink(net::Fd connection, net::Fd wake, std::chrono::milliseconds resume_window);

  v1::SessionResponse session_call(const v1::SessionRequest& request, const char* what,
                                   const std::vector<int>& fds = {},
                                   std::vector<net::Fd>* received = nullptr,
                                   uint64_t* connection = nullptr) override;
  v1::SessionResponse resume_call(const v1::SessionRequest& request, const char* what,
                                  const std::vector<int>& fds = {},
                                  std::vector<net::Fd>* received = nullptr) override;
  std::optional<v1::SessionResponse> call_on(uint64_t connection, const v1::SessionRequest& request,
                                             const char* what,
                                             const std::vector<int>& fds = {}) override;
  bool resumed_since(uint64_t connection, Clock::time_point deadline) override;
  void wait_while_resuming(Clock::time_point deadline) const override;
  uint64_t current_connection() const override {
    return connection_.load(std::memory_order_acquire);
  }
  void throw_if_gone() const override;
  bool gone() const override {
    return detached_.load(std::memory_order_acquire) ||
           state_.load(std::memory_order_acquire) == State::kGone;
  }
  Clock::time_point call_deadline() const override;

  // Throws kInvalidArgument in a process other than the one that attached (a forked child): the
  // connection is the parent's.
  void check_owner() const override;
  bool owned_here() const;
  std::chrono::milliseconds resume_window() const { return resume_window_; }
  int attach_fd() const { return attach_fd_.get(); }
  // Wakes irisd's progress thread for this session (entries wait in its ring).
  void wake_irisd() const override;
  // Above every buffer id irisd has given this session (ResumeSession.next_buffer_id).
  uint64_t next_buffer_id() const { return next_buffer_id_.load(std::memory_order_relaxed); }
  bool up() const { return state_.load(std::memory_order_acquire) == State::kUp; }
  bool resuming() const override {
    return state_.load(std::memory_order_acquire) == State::kResuming;
  }

  // The resume's steps, on the daemon watch's thread. begin_resume(): calls wait from now on.
  void begin_resume();
  // The next irisd attached: the same descriptor numbers lead to it (threads reading them never
  // see a closed one), and the connection count advances before the tables are read.
  void switch_to(const net::Fd& connection, const net::Fd& wake);
  // The irisd the resume in progress left.
  uint64_t connection_left() const { return connection_left_; }
  void resumed();
  // irisd is gone for good, `why`; callers waiting wake to see it.
  void give_up(std::string why);
  // The client detaches: no call goes out any more and the connection closes.
  void close();
  bool detached() const override { return detached_.load(std::memory_order_acquire); }

 private:
  enum class State { kUp, kResuming, kGone };
  // call() and call_on(): `only_on` set, nullopt when the connection leads to another irisd.
  std::optional<v1::SessionResponse> exchange(const v1::SessionRequest& request, const char* what,
                                              const std::vector<int>& fds,
                                              std::vector<net::Fd>* received, uint64_t* connection,
                                              std::optional<uint64_t> only_on);

  net::Fd attach_fd_;
  net::Fd wake_fd_;
  const pid_t owner_pid_;
  const std::chrono::milliseconds resume_window_;
  std::atomic<bool> detached_{false};
  std::atomic<State> state_{State::kUp};
  // Which irisd attach_fd_ leads to: advanced under attach_mutex_ as a resume switches it.
  std::atomic<uint64_t> connection_{0};
  uint64_t connection_left_ = 0;  // the watch's thread alone
  std::mutex attach_mutex_;       // one session call at a time on attach_fd_
  mutable std::mutex state_mutex_;
  mutable std::condition_variable state_changed_;
  std::string gone_why_;  // set before state_ becomes kGone
  std::atomic<uint64_t> next_buffer_id_{1};
};

}  // namespace iris
