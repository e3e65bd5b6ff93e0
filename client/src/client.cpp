#include "iris/client.hpp"

#include <mutex>
#include <vector>

#include "client/src/buffer_impl.hpp"
#include "client/src/client_impl.hpp"
#include "iris/iris.h"
#include "iris/shared/default_socket.hpp"

namespace iris {

std::string default_socket_path() { return default_socket(); }

namespace {
Client::Impl& usable(const std::shared_ptr<Client::Impl>& impl) {
  if (!impl)
    throw Error(ErrorCode::kInvalidArgument,
                "this iris::Client is empty (default-constructed or moved from): use "
                "iris::Client::connect()");
  impl->check_owner();
  return *impl;
}
}  // namespace

namespace {
// Every session of this process, for memory an allocator is about to free (iris_gpu_memory_freed).
std::mutex live_mutex;
std::vector<std::weak_ptr<Client::Impl>> live;
}  // namespace

Client Client::connect(const ClientOptions& options) {
  Client c;
  c.impl_ = std::make_shared<Impl>(options);
  std::lock_guard lock(live_mutex);
  std::erase_if(live, [](const auto& w) { return w.expired(); });
  live.push_back(c.impl_);
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

Buffer Client::allocate(std::size_t bytes) { return usable(impl_).allocate(bytes); }

Buffer Client::register_cuda_buffer(void* device_ptr, std::size_t bytes) {
  return usable(impl_).register_gpu_buffer(GpuVendor::kCuda, device_ptr, bytes);
}

Buffer Client::register_hip_buffer(void* device_ptr, std::size_t bytes) {
  return usable(impl_).register_gpu_buffer(GpuVendor::kHip, device_ptr, bytes);
}

Buffer Client::register_host(void* ptr, std::size_t bytes) {
  return usable(impl_).register_host(ptr, bytes);
}

Buffer Client::share(const Buffer& other) {
  if (!other.impl_)
    throw Error(ErrorCode::kInvalidArgument, "share: the Buffer is empty (moved from?)");
  return usable(impl_).share(*other.impl_);
}

Request Client::nop() {
  shm::SubmitEntry entry{};
  entry.opcode = static_cast<uint32_t>(shm::Opcode::kNop);
  return usable(impl_).submit(entry, nullptr, false);
}

void Client::check_graphs() { usable(impl_).check_graphs(); }

Client::GpuRegistrations Client::gpu_registrations() const {
  GpuRegistrationCache* cache = usable(impl_).registrations->existing_gpu_cache();
  if (cache == nullptr) return {};
  return {cache->registrations(), cache->retiring()};
}

std::string Client::node_address() {
  v1::SessionRequest request;
  request.mutable_node_address();
  return usable(impl_).link->session_call(request, "node address").node_address();
}

void Client::report_api_work(const std::vector<ApiWork>& work) {
  v1::SessionRequest request;
  auto* report = request.mutable_report_api_work();
  for (const ApiWork& w : work) {
    auto* op = report->add_operations();
    op->set_operation(w.operation);
    op->set_calls(w.calls);
    op->set_irisd_bytes(w.irisd_bytes);
    op->set_sm_kernel_bytes(w.sm_kernel_bytes);
    op->set_host_bytes(w.host_bytes);
    op->set_fallback_bytes(w.fallback_bytes);
  }
  usable(impl_).link->session_call(request, "report of API operations");
}

std::string Client::meeting_point() {
  v1::SessionRequest request;
  request.mutable_meeting_point();
  return usable(impl_).link->session_call(request, "meeting point").meeting_point();
}

void Client::detach() {
  if (impl_) impl_->detach();
}
uint64_t Client::session_id() const { return usable(impl_).session_id; }
uint32_t Client::ring_depth() const { return usable(impl_).view.ring_depth; }
const std::string& Client::engine() const { return usable(impl_).engine; }
const std::string& Client::daemon_version() const { return usable(impl_).daemon_version; }

}  // namespace iris

// Every session of this process drops its first-use registrations of GPU memory in
// [ptr, ptr + bytes), which is about to be freed (iris.h).
extern "C" void iris_gpu_memory_freed(const void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  const auto begin = reinterpret_cast<uintptr_t>(ptr);
  const uintptr_t end = begin + (bytes > 0 ? bytes : 1);
  std::vector<std::shared_ptr<iris::Client::Impl>> sessions;
  {
    std::lock_guard lock(iris::live_mutex);
    for (const auto& w : iris::live)
      if (auto impl = w.lock()) sessions.push_back(std::move(impl));
  }
  for (const auto& impl : sessions)
    if (iris::GpuRegistrationCache* cache = impl->registrations->existing_gpu_cache())
      cache->forget_range(begin, end);
}
