#include "iris/client.hpp"

#include "client/src/client_impl.hpp"

namespace iris {

Client Client::connect(const ClientOptions& options) {
  Client c;
  c.impl_ = std::make_shared<Impl>(options);
  return c;
}

Client::Client() = default;
Client::~Client() {
  if (impl_) impl_->detach();
}
Client::Client(Client&&) noexcept = default;
Client& Client::operator=(Client&& other) noexcept {
  if (this != &other) {
    if (impl_) impl_->detach();
    impl_ = std::move(other.impl_);
  }
  return *this;
}

Buffer Client::allocate(std::size_t bytes) { return impl_->allocate(bytes); }

Buffer Client::register_cuda_buffer(void* device_ptr, std::size_t bytes) {
  return impl_->register_gpu_buffer(GpuVendor::kCuda, device_ptr, bytes);
}

Buffer Client::register_hip_buffer(void* device_ptr, std::size_t bytes) {
  return impl_->register_gpu_buffer(GpuVendor::kHip, device_ptr, bytes);
}

Request Client::nop() {
  shm::SubmitEntry entry{};
  entry.opcode = static_cast<uint32_t>(shm::Opcode::kNop);
  return impl_->submit(entry, nullptr);
}

void Client::detach() { impl_->detach(); }
uint64_t Client::session_id() const { return impl_->session_id; }
uint32_t Client::ring_depth() const { return impl_->view.ring_depth; }
const std::string& Client::engine() const { return impl_->engine; }
const std::string& Client::daemon_version() const { return impl_->daemon_version; }

}  // namespace iris
