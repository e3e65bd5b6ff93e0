#include "iris/request.hpp"

#include "client/src/failure_text.hpp"
#include "client/src/process_id.hpp"
#include "client/src/request_impl.hpp"

#include <unistd.h>

#include <optional>
#include <tuple>

namespace iris {

Request::Impl::~Impl() {
  if (in_flight && !done && client->link->owned_here()) client->submissions->abandon(slot, outcome);
}

void Request::Impl::finish(ErrorCode result) {
  done = true;
  std::tie(code, why) = client->submissions->collect(slot, outcome, result);
}

Request::Request() = default;
namespace {
constexpr const char* kEmptyRequest =
    "an empty Request: nothing to wait for on the host (a collective captured into a CUDA graph "
    "is waited for by the graph; synchronize its stream, then check_graphs())";
}  // namespace

Request::Request(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
Request::Request(Request&&) noexcept = default;
Request& Request::operator=(Request&&) noexcept = default;
Request::~Request() = default;

namespace {
// The daemon's reason first (which rank, which field, which sizes), then what to do.
void throw_if_failed(ErrorCode code, const std::string& why) {
  if (code == ErrorCode::kOk) return;
  throw Error(code,
              why.empty() ? describe_failure(code) : why + " (" + describe_failure(code) + ")");
}
}  // namespace

bool Request::test() {
  if (!impl_) throw Error(ErrorCode::kInvalidArgument, kEmptyRequest);
  impl_->client->check_owner();
  if (!impl_->done) {
    std::optional<ErrorCode> code;
    if (impl_->outcome.ready.load(std::memory_order_acquire)) {
      code = impl_->outcome.code;
    } else {
      code = impl_->client->submissions->poll(impl_->slot, impl_->generation);
    }
    if (!code) {
      impl_->client->check_daemon();
      return false;
    }
    impl_->finish(*code);
  }
  throw_if_failed(impl_->code, impl_->why);
  return true;
}

bool Request::wait(std::chrono::nanoseconds timeout) {
  if (!impl_) throw Error(ErrorCode::kInvalidArgument, kEmptyRequest);
  if (!impl_->done) {
    auto code = impl_->client->submissions->wait(impl_->slot, impl_->generation,
                                                 deadline_after(timeout), &impl_->outcome);
    if (!code) return false;
    impl_->finish(*code);
  }
  throw_if_failed(impl_->code, impl_->why);
  return true;
}

void Request::wait() { wait(std::chrono::nanoseconds::max()); }

void wait_all(std::vector<Request>& requests) {
  // Every request is waited for, so that no buffer is still in use when this throws.
  std::optional<Error> first;
  for (Request& r : requests) {
    try {
      r.wait();
    } catch (const Error& e) {
      if (!first) first = e;
    }
  }
  if (first) throw *first;
}

}  // namespace iris
