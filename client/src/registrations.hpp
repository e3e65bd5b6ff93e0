// The memory a session registered with irisd, and where a pointer lies in it: host memory irisd
// allocated (allocate, register_host, argument areas: irisd keeps none of it across a restart,
// libiris hands it to the next irisd), the caller's GPU memory registered explicitly, the
// first-use registrations of GPU memory (GpuRegistrationCache) and the stream done flags. Its one
// table has its own lock; its resume step registers all of it again on the next irisd, under the
// ids it had.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "client/gpu/gpu_registration_cache.hpp"
#include "client/gpu/gpu_runtime.hpp"
#include "client/src/session_link.hpp"
#include "iris/client.hpp"
#include "iris/shared/shm_segment.hpp"

namespace iris {

// Where a pointer lies inside a registered buffer.
struct BufferLocation {
  uint64_t buffer_id;
  uint64_t offset;
  uint64_t available;  // bytes from the pointer to the buffer's end
  bool gpu;            // memory of the caller's GPU (not a buffer from allocate)
};

class Registrations {
 public:
  explicit Registrations(SessionLink& link) : link_(link) {}

  // Host memory irisd allocates for this session.
  struct HostAllocation {
    uint64_t id;
    shm::ShmSegment segment;
    uint64_t connection;  // the irisd that answered
  };
  HostAllocation allocate_host(std::size_t bytes, const char* what);
  // Registers GPU memory of this process through the vendor's runtime (IPC handle or VMM fds);
  // `resume_id`: the id to register it under again on the resume's connection. `connection`: the
  // irisd that answered.
  uint64_t register_gpu(GpuRuntime& runtime, GpuVendor vendor, void* device_ptr, std::size_t bytes,
                        uint64_t resume_id = 0, uint64_t* connection = nullptr);
  // Frees `buffer_id` on the irisd of `connection` alone: a later irisd never knew it, or knows it
  // as another buffer.
  void deregister(uint64_t buffer_id, uint64_t connection);

  // Records a range registered as `id` on `connection` for locate(); `gpu` for the caller's GPU
  // memory (of `vendor`); `memfd`: host memory irisd allocated, handed to the next irisd on a
  // resume. False, recording nothing, when that irisd has gone since: register again. `map_in`
  // runs under the table's lock once the answer counts, before the range is recorded.
  bool record(uint64_t id, uint64_t connection, void* base, std::size_t bytes, bool gpu,
              std::shared_ptr<const net::Fd> memfd = nullptr, GpuVendor vendor = GpuVendor::kCuda,
              const std::function<void()>& map_in = {});
  // The memfd of the host memory recorded at `base` (null: none there, or GPU memory).
  std::shared_ptr<const net::Fd> memfd_of(const void* base) const;
  // The range at `base` is no longer the caller's to use: forgotten, and freed on irisd.
  void forget(uint64_t id, void* base);
  // Finds the registered buffer holding each pointer (nullopt where none does, or the pointer is
  // null): a collective's two sides under one lock.
  std::array<std::optional<BufferLocation>, 2> locate(std::array<const void*, 2> ptrs) const;

  // The first-use registration cache, made on first ask where the engine takes CUDA memory
  // (`cuda_engine`) and `capacity` > 0; null where it cannot be (no driver).
  GpuRegistrationCache* gpu_cache(bool cuda_engine, std::size_t capacity,
                                  GpuRegistrationCache::Session& session);
  // The cache if made already, else null (never makes it).
  GpuRegistrationCache* existing_gpu_cache();
  // A first-use registration of [base, base + bytes) (GpuRegistrationCache::Session).
  GpuRegistrationCache::Session::Registration register_range(void* base, std::size_t bytes);

  // Registers the stream done flags (StreamFlagsMapping sets them up), kept for resuming.
  void register_done_flags(const v1::SessionRequest& request);

  // The resume step, on the resume's connection: host memory handed over, GPU memory and the
  // first-use registrations registered again under their ids (memory freed since stays behind),
  // the done flags again. Held under the table's lock throughout: a buffer freed meanwhile is
  // either carried and then freed on the next irisd, or neither.
  void resume();
  // Hands one area of host memory irisd allocated to the resume's irisd.
  void adopt(uint64_t id, uint64_t bytes, int memfd);

 private:
  struct Registered {
    uint64_t id;
    std::size_t bytes;
    bool gpu;
    GpuVendor vendor;
    std::shared_ptr<const net::Fd> memfd;  // host memory irisd allocated
  };

  SessionLink& link_;
  mutable std::mutex mutex_;
  std::map<uintptr_t, Registered> buffers_;  // by base address
  std::mutex gpu_cache_mutex_;               // creating the cache
  bool gpu_cache_tried_ = false;
  std::unique_ptr<GpuRuntime> gpu_cache_runtime_;
  std::unique_ptr<GpuRegistrationCache> gpu_cache_;
  std::mutex done_flags_mutex_;
  std::optional<v1::SessionRequest> done_flags_registration_;
};

}  // namespace iris
