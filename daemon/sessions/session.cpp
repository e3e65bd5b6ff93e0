#include "daemon/sessions/session.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <cstring>

#include "iris/shared/futex.hpp"

namespace iris::daemon {

Session::Session(uint64_t id, net::PeerCredentials peer, std::string client_name,
                 shm::ShmSegment segment, const shm::SegmentLayout& layout, net::Fd wake_fd,
                 net::Fd connection, bool resumed)
    : id_(id),
      peer_(peer),
      client_name_(std::move(client_name)),
      attached_at_(std::chrono::steady_clock::now()),
      segment_(std::move(segment)),
      view_(shm::SegmentView::at(segment_.data(), layout)),
      ring_(view_.ring_control, view_.ring_entries, layout.ring_depth),
      wake_fd_(std::move(wake_fd)),
      connection_(std::move(connection)),
      resumed_(resumed) {}

Session::~Session() {
  // The client learns at once that its session is over (detached, or ended by the daemon).
  if (connection_) ::shutdown(connection_.get(), SHUT_RDWR);
}

bool Session::complete(uint32_t slot, uint32_t generation, ErrorCode code, const std::string& why) {
  if (code != ErrorCode::kOk) {
    // Before the completion word (release): the client reads it once it sees the failure.
    char* text = view_.failures[slot].text;
    const std::size_t n = std::min(why.size(), shm::kFailureTextBytes - 1);
    std::memcpy(text, why.data(), n);
    text[n] = '\0';
  }
  view_.slots[slot].word.store(shm::pack_completion(generation, code), std::memory_order_release);
  const bool first = !needs_wake_;
  needs_wake_ = true;
  return first;
}

bool Session::stream_ready(uint32_t slot, uint32_t generation) const {
  return shm::generation_reached(view_.flags[slot].ready.load(std::memory_order_acquire),
                                 generation);
}

bool Session::plan_ready(uint32_t plan_slot) const {
  return view_.flags[view_.ring_depth + plan_slot].ready.load(std::memory_order_acquire) == 1;
}

void Session::clear_plan_ready(uint32_t plan_slot) {
  // Kept set while the replay runs, so that a replay in flight when irisd dies is still marked
  // ready for the next irisd; the graph writes 1 again only after this replay's done flag.
  view_.flags[view_.ring_depth + plan_slot].ready.store(0, std::memory_order_release);
}

void Session::reset_plan_flags(uint32_t plan_slot) {
  const uint32_t index = view_.ring_depth + plan_slot;
  view_.flags[index].ready.store(0, std::memory_order_relaxed);
  view_.slots[index].word.store(0, std::memory_order_release);
}

void Session::flush_wake() {
  if (!needs_wake_) return;
  needs_wake_ = false;
  view_.header->completion_epoch.fetch_add(1, std::memory_order_seq_cst);
  if (view_.header->client_waiters.load(std::memory_order_seq_cst) != 0)
    shm::futex_wake_all(view_.header->completion_epoch);
}

void Session::set_daemon_needs_wakeup(bool value) {
  view_.header->daemon_needs_wakeup.store(value ? 1u : 0u, std::memory_order_seq_cst);
}

void Session::mark_daemon_stopped() {
  view_.header->daemon_state.store(static_cast<uint32_t>(shm::DaemonState::kStopped),
                                   std::memory_order_seq_cst);
  view_.header->completion_epoch.fetch_add(1, std::memory_order_seq_cst);
  shm::futex_wake_all(view_.header->completion_epoch);
}

void Session::mark_session_ended() {
  auto running = static_cast<uint32_t>(shm::DaemonState::kRunning);
  view_.header->daemon_state.compare_exchange_strong(
      running, static_cast<uint32_t>(shm::DaemonState::kSessionEnded), std::memory_order_seq_cst);
}

}  // namespace iris::daemon
