// What the parts of a session (registrations, communicators, graph plans) need of its link to
// irisd: calls, each saying which irisd answered it. irisd may restart under a call; the session
// then resumes on the next irisd and carries what the tables held then, so a part records a
// result only if the irisd that gave it is still the one attached once the table's lock is held
// (call_and_record), else it asks again. DaemonLink is the real link; unit tests give the parts
// a fake one.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "iris/shared/unix_socket.hpp"
#include "iris/v1/attach.pb.h"

namespace iris {

// Now + `timeout`, saturating (a timeout of nanoseconds::max() waits for ever).
std::chrono::steady_clock::time_point deadline_after(std::chrono::nanoseconds timeout);

class SessionLink {
 public:
  using Clock = std::chrono::steady_clock;
  virtual ~SessionLink() = default;

  // One call of the session, with `fds` beside it; the descriptors that came with the answer go
  // to `received`, the irisd it was answered on to `connection`. Waits while the session resumes,
  // and goes to the next irisd when the connection broke under it (within the resume window).
  // Throws the answer's error, or kDaemonGone.
  virtual v1::SessionResponse session_call(const v1::SessionRequest& request, const char* what,
                                           const std::vector<int>& fds = {},
                                           std::vector<net::Fd>* received = nullptr,
                                           uint64_t* connection = nullptr) = 0;
  // A call of the resume itself, on the connection it attached (the session is not up yet).
  virtual v1::SessionResponse resume_call(const v1::SessionRequest& request, const char* what,
                                          const std::vector<int>& fds = {},
                                          std::vector<net::Fd>* received = nullptr) = 0;
  // The call on the irisd of `connection` alone: nullopt, sending nothing, once another is
  // attached. Throws as session_call.
  virtual std::optional<v1::SessionResponse> call_on(uint64_t connection,
                                                     const v1::SessionRequest& request,
                                                     const char* what,
                                                     const std::vector<int>& fds = {}) = 0;
  // After a call on `connection` broke (kDaemonGone): waits, until `deadline`, for the session to
  // resume; true when it resumed with another irisd.
  virtual bool resumed_since(uint64_t connection, Clock::time_point deadline) = 0;
  // Waits while the session resumes, until `deadline`.
  virtual void wait_while_resuming(Clock::time_point deadline) const = 0;
  // The irisd attached now (a count: each resume advances it).
  virtual uint64_t current_connection() const = 0;
  // Throws kDaemonGone, saying why, once irisd is gone for good (or the client detached).
  virtual void throw_if_gone() const = 0;
  // True once irisd is gone for good or the client detached.
  virtual bool gone() const = 0;
  // When a call that broke gives up: now + the resume window + an attach's timeout.
  virtual Clock::time_point call_deadline() const = 0;
  // True while the session resumes (calls and submissions wait).
  virtual bool resuming() const = 0;
  virtual bool detached() const = 0;
  // Throws kInvalidArgument in a process other than the one that attached (a forked child).
  virtual void check_owner() const = 0;
  // Wakes irisd's progress thread for this session (entries wait in its ring).
  virtual void wake_irisd() const = 0;

  bool answered_by_current_irisd(uint64_t connection) const {
    return connection == current_connection();
  }
  // A call whose result goes into a table guarded by `table`: made again until the irisd that
  // answered it is still the one attached once `table` is held. `call()` makes it and returns
  // the connection it was answered on; `record(connection)` runs under `table`.
  template <typename Call, typename Record>
  auto call_and_record(std::mutex& table, Call&& call, Record&& record) {
    for (;;) {
      const uint64_t connection = call();
      std::lock_guard lock(table);
      if (answered_by_current_irisd(connection)) return record(connection);
    }
  }
};

}  // namespace iris
