#include "iris/request.hpp"

#include "client/src/client_impl.hpp"

namespace iris {

Request::Impl::~Impl() {
  if (!done) client->release_slot(slot, false);
}

void Request::Impl::finish(ErrorCode result) {
  done = true;
  code = result;
  client->release_slot(slot, true);
}

Request::Request() = default;
Request::Request(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
Request::Request(Request&&) noexcept = default;
Request& Request::operator=(Request&&) noexcept = default;
Request::~Request() = default;

namespace {
void throw_if_failed(ErrorCode code) {
  if (code != ErrorCode::kOk) throw Error(code, describe_failure(code));
}
}  // namespace

bool Request::test() {
  if (!impl_) throw Error(ErrorCode::kInvalidArgument, "test() on an empty Request");
  if (!impl_->done) {
    auto code = impl_->client->poll(impl_->slot, impl_->generation);
    if (!code) return false;
    impl_->finish(*code);
  }
  throw_if_failed(impl_->code);
  return true;
}

bool Request::wait(std::chrono::nanoseconds timeout) {
  if (!impl_) throw Error(ErrorCode::kInvalidArgument, "wait() on an empty Request");
  if (!impl_->done) {
    const auto now = std::chrono::steady_clock::now();
    const auto deadline =
        timeout >= std::chrono::steady_clock::time_point::max() - now
            ? std::chrono::steady_clock::time_point::max()
            : now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(timeout);
    auto code = impl_->client->wait(impl_->slot, impl_->generation, deadline);
    if (!code) return false;
    impl_->finish(*code);
  }
  throw_if_failed(impl_->code);
  return true;
}

void Request::wait() { wait(std::chrono::nanoseconds::max()); }

}  // namespace iris
