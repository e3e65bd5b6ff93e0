// A SessionLink with no irisd behind it, for the unit tests of the session's parts: it records
// every call (what, the request, the descriptors beside it) and answers each with what `answer`
// makes, on the connection of its count; restart() stands for a resume switching to the next
// irisd, and the resume's own calls are told apart from the session's.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "client/src/session_link.hpp"
#include "iris/error.hpp"

namespace iris::testing {

class FakeSessionLink final : public SessionLink {
 public:
  struct Call {
    std::string what;
    v1::SessionRequest request;
    std::size_t fds;
    bool resume;  // a call of the resume itself
    uint64_t connection;
  };
  std::vector<Call> calls;
  // Makes the answer (the default: success, buffer and communicator ids counted up).
  std::function<v1::SessionResponse(const v1::SessionRequest&)> answer =
      [this](const auto& request) {
        v1::SessionResponse response;
        if (request.has_comm_init()) {
          response.set_comm_id(++next_comm_id);
          response.set_comm_secret("secret-" + std::to_string(next_comm_id));
        }
        if (request.has_allocate_host() || request.has_register_ipc() || request.has_register_vmm())
          response.mutable_registered()->set_buffer_id(++next_buffer_id);
        return response;
      };
  uint64_t connection = 0;
  uint64_t next_comm_id = 100;
  uint64_t next_buffer_id = 0;
  bool gone_for_good = false;

  // The session resumes on the next irisd.
  void restart() { ++connection; }
  std::vector<Call> calls_named(const std::string& what) const {
    std::vector<Call> found;
    for (const Call& c : calls)
      if (c.what == what) found.push_back(c);
    return found;
  }

  v1::SessionResponse session_call(const v1::SessionRequest& request, const char* what,
                                   const std::vector<int>& fds, std::vector<net::Fd>*,
                                   uint64_t* on) override {
    if (gone_for_good) throw Error(ErrorCode::kDaemonGone, "gone");
    calls.push_back({what, request, fds.size(), false, connection});
    if (on != nullptr) *on = connection;
    return answer(request);
  }
  v1::SessionResponse resume_call(const v1::SessionRequest& request, const char* what,
                                  const std::vector<int>& fds, std::vector<net::Fd>*) override {
    calls.push_back({what, request, fds.size(), true, connection});
    return answer(request);
  }
  std::optional<v1::SessionResponse> call_on(uint64_t on, const v1::SessionRequest& request,
                                             const char* what,
                                             const std::vector<int>& fds) override {
    if (on != connection) return std::nullopt;
    calls.push_back({what, request, fds.size(), false, connection});
    return answer(request);
  }
  bool resumed_since(uint64_t on, Clock::time_point) override { return on != connection; }
  void wait_while_resuming(Clock::time_point) const override {}
  uint64_t current_connection() const override { return connection; }
  void throw_if_gone() const override {
    if (gone_for_good) throw Error(ErrorCode::kDaemonGone, "gone");
  }
  bool gone() const override { return gone_for_good; }
  Clock::time_point call_deadline() const override {
    return Clock::now() + std::chrono::seconds(1);
  }
  bool resuming() const override { return false; }
  bool detached() const override { return false; }
  void check_owner() const override {}
  void wake_irisd() const override {}
};

}  // namespace iris::testing
