#include "client/src/registrations.hpp"

#include "client/src/debug_log.hpp"
#include "iris/error.hpp"

namespace iris {

Registrations::HostAllocation Registrations::allocate_host(std::size_t bytes, const char* what) {
  v1::SessionRequest request;
  request.mutable_allocate_host()->set_bytes(bytes);
  std::vector<net::Fd> fds;
  uint64_t connection = 0;
  const auto response = link_.session_call(request, what, {}, &fds, &connection);
  if (fds.size() != 1)
    throw Error(ErrorCode::kProtocolMismatch,
                std::string(what) + ": no memory came with the answer");
  try {
    return {response.registered().buffer_id(), shm::ShmSegment::map(std::move(fds[0])), connection};
  } catch (const std::exception& e) {
    throw Error(ErrorCode::kProtocolMismatch, e.what());
  }
}

uint64_t Registrations::register_gpu(GpuRuntime& runtime, GpuVendor vendor, void* device_ptr,
                                     std::size_t bytes, uint64_t resume_id, uint64_t* connection) {
  ExportedGpuBuffer exported = export_gpu_buffer(runtime, device_ptr, bytes);
  v1::SessionRequest request;
  std::vector<int> fds;
  if (exported.ipc) {
    *request.mutable_register_ipc() = register_request(vendor, *exported.ipc);
    request.mutable_register_ipc()->set_resume_buffer_id(resume_id);
  } else {
    *request.mutable_register_vmm() = exported.vmm;
    request.mutable_register_vmm()->set_resume_buffer_id(resume_id);
    for (const net::Fd& fd : exported.fds) fds.push_back(fd.get());
  }
  if (resume_id != 0)
    return link_.resume_call(request, "register GPU buffer again", fds).registered().buffer_id();
  return link_.session_call(request, "register GPU buffer", fds, nullptr, connection)
      .registered()
      .buffer_id();
}

void Registrations::deregister(uint64_t buffer_id, uint64_t connection) {
  if (link_.gone()) return;
  v1::SessionRequest request;
  request.mutable_deregister()->set_buffer_id(buffer_id);
  try {
    link_.call_on(connection, request, "free buffer");
  } catch (const Error& e) {
    // That irisd went, and the buffer with it: no resume carried it.
    if (e.code() != ErrorCode::kDaemonGone) throw;
  }
}

bool Registrations::record(uint64_t id, uint64_t connection, void* base, std::size_t bytes,
                           bool gpu, std::shared_ptr<const net::Fd> memfd, GpuVendor vendor,
                           const std::function<void()>& map_in) {
  std::lock_guard lock(mutex_);
  if (!link_.answered_by_current_irisd(connection)) return false;
  if (map_in) map_in();
  buffers_[reinterpret_cast<uintptr_t>(base)] = {id, bytes, gpu, vendor, std::move(memfd)};
  return true;
}

std::shared_ptr<const net::Fd> Registrations::memfd_of(const void* base) const {
  std::lock_guard lock(mutex_);
  const auto it = buffers_.find(reinterpret_cast<uintptr_t>(base));
  return it == buffers_.end() ? nullptr : it->second.memfd;
}

void Registrations::forget(uint64_t id, void* base) {
  uint64_t connection = 0;
  {
    std::lock_guard lock(mutex_);
    buffers_.erase(reinterpret_cast<uintptr_t>(base));
    connection = link_.current_connection();
  }
  try {
    deregister(id, connection);
  } catch (const Error&) {
    // The session's end frees it anyway.
  }
}

std::array<std::optional<BufferLocation>, 2> Registrations::locate(
    std::array<const void*, 2> ptrs) const {
  std::array<std::optional<BufferLocation>, 2> found;
  std::lock_guard lock(mutex_);
  for (std::size_t i = 0; i < ptrs.size(); ++i) {
    if (ptrs[i] == nullptr) continue;
    const auto p = reinterpret_cast<uintptr_t>(ptrs[i]);
    auto it = buffers_.upper_bound(p);
    if (it == buffers_.begin()) continue;
    --it;
    const uintptr_t base = it->first;
    if (p - base > it->second.bytes) continue;  // one past the end is a 0-byte range
    found[i] =
        BufferLocation{it->second.id, p - base, it->second.bytes - (p - base), it->second.gpu};
  }
  return found;
}

GpuRegistrationCache* Registrations::gpu_cache(bool cuda_engine, std::size_t capacity,
                                               GpuRegistrationCache::Session& session) {
  std::lock_guard lock(gpu_cache_mutex_);
  if (!gpu_cache_tried_) {
    gpu_cache_tried_ = true;
    if (cuda_engine && capacity > 0) {
      try {
        gpu_cache_runtime_ = make_gpu_runtime(GpuVendor::kCuda);
        gpu_cache_ = std::make_unique<GpuRegistrationCache>(*gpu_cache_runtime_, session, capacity);
      } catch (const Error&) {
        // No CUDA driver here: no GPU memory to register either.
      }
    }
  }
  return gpu_cache_.get();
}

GpuRegistrationCache* Registrations::existing_gpu_cache() {
  std::lock_guard lock(gpu_cache_mutex_);
  return gpu_cache_.get();
}

GpuRegistrationCache::Session::Registration Registrations::register_range(void* base,
                                                                          std::size_t bytes) {
  GpuRegistrationCache::Session::Registration made{};
  made.buffer_id =
      register_gpu(*gpu_cache_runtime_, GpuVendor::kCuda, base, bytes, 0, &made.connection);
  return made;
}

void Registrations::register_done_flags(const v1::SessionRequest& request) {
  link_.call_and_record(
      done_flags_mutex_,
      [&] {
        uint64_t connection = 0;
        link_.session_call(request, "register stream done flags", {}, nullptr, &connection);
        return connection;
      },
      [&](uint64_t) { done_flags_registration_ = request; });
}

void Registrations::adopt(uint64_t id, uint64_t bytes, int memfd) {
  v1::SessionRequest request;
  request.mutable_adopt_host()->set_buffer_id(id);
  request.mutable_adopt_host()->set_bytes(bytes);
  link_.resume_call(request, "resume a host buffer", {memfd});
}

void Registrations::resume() {
  {
    std::lock_guard lock(mutex_);
    for (const auto& [address, b] : buffers_) {
      void* base = reinterpret_cast<void*>(address);
      if (b.memfd) {
        adopt(b.id, b.bytes, b.memfd->get());
      } else if (b.gpu) {
        const auto runtime = make_gpu_runtime(b.vendor);
        // Freed without being deregistered (a cudaFree in user code): it stays behind, and a
        // request naming it fails as an unknown buffer; the rest of the session resumes.
        bool present = true;
        try {
          runtime->use_context_of(base);  // this thread is libiris's, with no context of its own
        } catch (const Error&) {
          present = false;
        }
        if (!present || !runtime->chunk_of(address)) {
          client::debug_log("resume: GPU buffer " + std::to_string(b.id) +
                            " was freed; not registered again");
          continue;
        }
        register_gpu(*runtime, b.vendor, base, b.bytes, b.id);
      }
    }
  }
  if (GpuRegistrationCache* cache = existing_gpu_cache()) {
    cache->for_each_registration([&](uintptr_t begin, uintptr_t end, uint64_t id, bool present) {
      // Memory freed since (torch's empty_cache, an OOM retry, a graph capture entered, an
      // expandable segment unmapped): dropped; memory allocated there again registers anew.
      if (!present) {
        client::debug_log("resume: first-use GPU registration " + std::to_string(id) +
                          " names freed memory; dropped");
        return;
      }
      gpu_cache_runtime_->use_context_of(reinterpret_cast<void*>(begin));
      register_gpu(*gpu_cache_runtime_, GpuVendor::kCuda, reinterpret_cast<void*>(begin),
                   end - begin, id);
    });
  }
  // The same GPU memory: streams waiting on it go on waiting.
  std::lock_guard lock(done_flags_mutex_);
  if (done_flags_registration_)
    link_.resume_call(*done_flags_registration_, "register stream done flags again");
}

}  // namespace iris
