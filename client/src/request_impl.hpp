// Request::Impl: one submitted request's slot, generation and result, shared by the Request and
// the slot's state in Client::Impl so that a Request outliving its Client still finds them.
#pragma once

#include <memory>
#include <string>

#include "client/src/client_impl.hpp"

namespace iris {

struct Request::Impl {
  Impl(std::shared_ptr<Client::Impl> c, uint32_t s, uint32_t g,
       std::shared_ptr<Client::Impl::Outcome> o)
      : client(std::move(c)), slot(s), generation(g), outcome(std::move(o)) {}
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl();

  std::shared_ptr<Client::Impl> client;
  uint32_t slot;
  uint32_t generation;
  std::shared_ptr<Client::Impl::Outcome> outcome;
  bool done = false;
  ErrorCode code = ErrorCode::kOk;
  std::string why;  // the daemon's reason for a failure

  void finish(ErrorCode result);
};

}  // namespace iris
