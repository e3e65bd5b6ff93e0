// Request::Impl: one submitted request's slot, generation and result, shared by the Request and
// the slot's state in Client::Impl so that a Request outliving its Client still finds them. Its
// outcome lives here (one allocation per request); the slot's state points at it while the
// request is in flight.
#pragma once

#include <memory>
#include <string>

#include "client/src/client_impl.hpp"

namespace iris {

struct Request::Impl {
  explicit Impl(std::shared_ptr<Client::Impl> c) : client(std::move(c)) {}
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl();

  std::shared_ptr<Client::Impl> client;
  uint32_t slot = 0;
  uint32_t generation = 0;
  // Set once the entry is in the ring: from then on the slot is this request's until collected.
  bool in_flight = false;
  Submissions::Outcome outcome;
  bool done = false;
  ErrorCode code = ErrorCode::kOk;
  std::string why;  // the daemon's reason for a failure

  void finish(ErrorCode result);
};

}  // namespace iris
