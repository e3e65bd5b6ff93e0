// Client::Impl after irisd went away: attach again to the same socket within the resume window,
// hand the next irisd the session's segment and host memory, register the GPU memory, communicators
// and graph plans again under the ids and places they had, and submit again the requests irisd had
// not completed. Everything a collective needs lives here in the client (its memory, its streams
// waiting on flags, its sequence of calls), so a restart of irisd is a pause. Each part of the
// session has its step, run in this order: the submissions settle what the previous irisd
// finished, the registrations and argument areas go over, the communicators join again, the
// graph plans register again, the unfinished requests go into the ring. Why running an
// unfinished collective again is safe, and where it is not: docs/RESTARTS.md.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "client/src/attach_handshake.hpp"
#include "client/src/client_impl.hpp"
#include "iris/shared/collective_shape.hpp"
#include "iris/shared/futex.hpp"

namespace iris {

namespace {
using clock = std::chrono::steady_clock;
// Attempts to reach the next irisd: often at first (a restart by systemd takes milliseconds to
// seconds), then every 100 ms.
constexpr auto kFirstRetry = std::chrono::milliseconds(2);
constexpr auto kMaxRetry = std::chrono::milliseconds(100);
// The next irisd's answer to the resume's attach (its engine may still be starting).
constexpr auto kResumeAnswerTimeout = std::chrono::milliseconds(10000);

std::string millis(clock::duration d) {
  return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count()) + " ms";
}
}  // namespace

int Client::Impl::give_up(std::string why) {
  link->give_up(std::move(why));
  // No irisd writes a done flag any more: the GPU streams go on (their receive buffers
  // unwritten; the host learns why from its next call), and sleepers wake to see it.
  release_stream_waits();
  submissions->wake_waiters();
  return -1;
}

int Client::Impl::reattach(DaemonWatch& watch) {
  const auto started = clock::now();
  const auto resume_window = link->resume_window();
  if (view.header->daemon_state.load(std::memory_order_acquire) ==
      static_cast<uint32_t>(shm::DaemonState::kSessionEnded))
    return give_up("irisd ended this session (the daemon log says why); attach again");
  if (resume_window.count() == 0)
    return give_up(
        "irisd stopped or died; attach again once it is back (this client does not "
        "wait for it: its resume window is 0)");
  link->begin_resume();
  const auto deadline = started + resume_window;
  // No entry reaches a ring until the session is back; then the unfinished ones go in first.
  std::unique_lock submitting = submissions->hold_ring();

  v1::AttachRequest request;
  request.set_client_name(options.client_name);
  request.mutable_resume()->set_previous_session_id(session_id);
  request.mutable_resume()->set_ring_depth(view.ring_depth);
  request.mutable_resume()->set_previous_daemon_version(latest_daemon_version_);
  std::string last = "irisd is not back";
  auto pause = kFirstRetry;
  bool stopped = false;  // the client detached meanwhile
  // Waits before the next attempt; false (and gives up) once the window has passed.
  auto wait_to_retry = [&](const std::string& why) -> bool {
    last = why;
    const auto now = clock::now();
    if (now >= deadline) return false;
    if (!watch.pause(std::chrono::duration_cast<std::chrono::milliseconds>(
            std::min<clock::duration>(pause, deadline - now)))) {
      stopped = true;
      return false;
    }
    pause = std::min(pause * 2, kMaxRetry);
    return true;
  };
  auto window_passed = [&] {
    return give_up(stopped ? "this client detached while irisd was away"
                           : "irisd did not come back within this client's resume window (" +
                                 millis(resume_window) + "; " + last +
                                 "); attach again once it is back, or set a longer window "
                                 "(ClientOptions::resume_window, IRIS_RESUME_WINDOW_MS)");
  };
  for (;;) {
    request.mutable_resume()->set_next_buffer_id(link->next_buffer_id());
    request.mutable_resume()->set_held_ms(
        std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - started).count());
    std::optional<client::Attached> attached;
    try {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now());
      attached = client::attach(
          options.socket_path, request,
          std::clamp(left, std::chrono::milliseconds(1), kResumeAnswerTimeout), 2, {segment.fd()});
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kUnavailable)
        return give_up("irisd came back but would not resume this session: " + e.message());
      if (!wait_to_retry(e.message())) return window_passed();
      continue;
    }
    if (!attached->response.resumed() || attached->fds.size() != 2)
      return give_up("the irisd that came back does not resume sessions (version " +
                     attached->response.daemon_version() + "); attach again");
    // Before the tables are read below (answered_by_current_irisd).
    link->switch_to(attached->connection, attached->fds[0]);
    try {
      submissions->settle_stream_completions();
      registrations->resume();
      submissions->adopt_args_areas();
      const auto comm_ids =
          comms->resume([this](uint64_t comm_id) { return submissions->unfinished(comm_id); });
      const bool lost = plans->resume(comm_ids);
      submissions->resubmit(comm_ids);  // makes no call: cannot fail
      // The session is back: the new ids hold from now on (an attempt that failed before this
      // point left them as they were, so the next one starts from the same state).
      comms->carry(comm_ids, link->connection_left(), link->current_connection());
      plans->carry(comm_ids);
      if (lost) {
        plans->release_lost();
        watch.set_tending(true);
      }
      session_id = attached->response.session_id();
      latest_daemon_version_ = attached->response.daemon_version();
      break;
    } catch (const Error& e) {
      // That irisd went too (killed again while we resumed): try the next one. Anything else
      // it refused is final.
      const bool went = e.code() == ErrorCode::kDaemonGone || e.code() == ErrorCode::kUnavailable;
      if (went && wait_to_retry(e.message())) continue;
      ::shutdown(link->attach_fd(), SHUT_RDWR);  // the new irisd ends the half-resumed session
      if (went) return window_passed();
      return give_up("irisd came back but this session could not resume: " + e.message());
    }
  }
  submitting.unlock();
  link->resumed();
  submissions->ring_doorbell();
  return link->attach_fd();
}

}  // namespace iris
