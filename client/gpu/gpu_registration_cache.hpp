// GPU memory the caller never registered (a torch tensor, any cudaMalloc or VMM allocation),
// registered with irisd on first use and kept while the memory stays the same.
//
// One registration per allocation: a cudaMalloc allocation as a whole (PyTorch's caching
// allocator carves many tensors out of one), a run of VMM allocations (expandable segments) as
// the allocations the range touches. Each registration remembers the id the driver gives each
// physical allocation (CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID: unique for the process's lifetime,
// also when the same address is mapped again), so a lookup sees memory freed and allocated again
// at the same address and registers it anew. That query is the cost of a call on memory seen
// before (one driver call per allocation the range touches).
//
// Bounded: at most `capacity` registrations; beyond that the least recently used one goes (also
// when irisd refuses a registration at its per-session buffer limit). A
// registration of memory found freed goes at once: a lookup finds it, and every new
// registration first checks all the others (one query per allocation), so freed VRAM that
// irisd imported is given back by the next first use of other memory. A registration that goes
// while a request may still name it (submitted, not yet completed) retires first and ends once that
// request has finished, so irisd never sees an id vanish under an entry in its ring. Registrations
// used by a collective captured in a CUDA graph stay while their memory does (the graph replays
// them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "client/gpu/gpu_runtime.hpp"

namespace iris {

class GpuRegistrationCache {
 public:
  // What the cache needs from its session.
  class Session {
   public:
    virtual ~Session() = default;
    struct Registration {
      uint64_t buffer_id;
      uint64_t connection;  // which irisd answered
    };
    // Registers [base, base + bytes) with irisd. Throws iris::Error.
    virtual Registration register_range(void* base, std::size_t bytes) = 0;
    // Whether the irisd that answered on `connection` is the one attached now, and which that
    // is. Asked under the lock that the session's resume reads for_each_registration under: an
    // answer from an irisd gone since may have been left out of it (register again), and an id
    // that leaves the table afterwards is known to the irisd attached then alone.
    virtual bool answered_by_current_irisd(uint64_t connection) const = 0;
    virtual uint64_t current_connection() const = 0;
    // Ends the registration on the irisd of `connection` (nothing if that irisd has gone).
    virtual void deregister(uint64_t buffer_id, uint64_t connection) = 0;
    // Whether the request in (slot, generation) has completed (or its slot moved on).
    virtual bool finished(uint32_t slot, uint32_t generation) const = 0;
  };

  struct Location {
    uint64_t buffer_id;
    uint64_t offset;
    uint64_t available;  // bytes from the pointer to the registration's end
    uintptr_t key;       // the registration's start, for submitted()
  };
  // The request that last named a registration.
  struct Use {
    uint32_t slot;
    uint32_t generation;
  };

  GpuRegistrationCache(GpuRuntime& runtime, Session& session, std::size_t capacity);
  ~GpuRegistrationCache();
  GpuRegistrationCache(const GpuRegistrationCache&) = delete;
  GpuRegistrationCache& operator=(const GpuRegistrationCache&) = delete;

  // The registration holding [ptr, ptr + bytes), made now if there is none; nullopt when `ptr`
  // is no GPU memory of this process. Throws iris::Error when the memory cannot be registered.
  // A location found is held (never deregistered) until submitted() or not_submitted() names it.
  std::optional<Location> locate(uintptr_t ptr, uint64_t bytes);
  // The request naming `found` was submitted: its registrations stay until it finishes (`use`),
  // or for as long as their memory stays (nullopt: a collective captured in a CUDA graph).
  void submitted(std::span<const Location> found, std::optional<Use> use);
  void not_submitted(std::span<const Location> found);
  // Memory about to be freed (the pool allocator's free): registrations touching it end now.
  void forget_range(uintptr_t begin, uintptr_t end);

  std::size_t registrations() const;
  std::size_t retiring() const;
  // Every registration, held or retiring, as [begin, end), its id, and whether its memory is
  // still the allocation it registered (not freed, nor freed and mapped anew): a session resumed
  // with a restarted irisd registers again those whose memory is, under the same ids; the others
  // end at their next lookup. Never waits for mutex_ (a lookup holds it across its session call,
  // which waits for that resume).
  void for_each_registration(
      const std::function<void(uintptr_t begin, uintptr_t end, uint64_t id, bool present)>& visit)
      const;

 private:
  struct Entry {
    uintptr_t begin;
    uintptr_t end;
    uint64_t id;
    std::vector<GpuChunk> chunks;
    uint64_t last_used;      // tick of the last lookup, for least-recently-used eviction
    std::optional<Use> use;  // the last request naming it
    bool pinned = false;     // named by a captured collective
    uint32_t held = 0;       // located for requests not yet submitted
  };
  // Whether `chunks` are still mapped as they were, in [begin, end).
  bool still_mapped(const std::vector<GpuChunk>& chunks, uintptr_t begin, uintptr_t end) const;
  bool in_flight(const Entry& e) const;
  // The entry `found` names, active or retiring; null when it is gone.
  Entry* find(const Location& found);
  void retire(std::map<uintptr_t, Entry>::iterator it);
  void end_finished_retirements();
  void evict_beyond_capacity();
  // Ends the least recently used registration no request names; false when there is none.
  bool end_least_recently_used();
  Entry register_covering(uintptr_t ptr, uint64_t bytes);

  GpuRuntime& runtime_;
  Session& session_;
  const std::size_t capacity_;
  mutable std::mutex mutex_;
  std::map<uintptr_t, Entry> entries_;  // by begin; disjoint
  // What irisd holds (id -> [begin, end)), entries and retiring ones, under a lock of its own
  // for the resume.
  mutable std::mutex registry_mutex_;
  struct Registered {
    uintptr_t begin;
    uintptr_t end;
    std::vector<GpuChunk> chunks;
  };
  std::map<uint64_t, Registered> registered_;
  std::vector<Entry> retiring_;
  uint64_t tick_ = 0;
};

// The registrations one request found, held until it is submitted; released unsubmitted when
// this goes without submitted() (a later argument was refused, the ring was full).
class HeldRegistrations {
 public:
  HeldRegistrations() = default;
  ~HeldRegistrations();
  HeldRegistrations(const HeldRegistrations&) = delete;
  HeldRegistrations& operator=(const HeldRegistrations&) = delete;

  // A location `cache` found (one cache per request: its client's).
  void add(GpuRegistrationCache& cache, const GpuRegistrationCache::Location& found) {
    cache_ = &cache;
    found_.push_back(found);
  }
  void submitted(std::optional<GpuRegistrationCache::Use> use);

 private:
  GpuRegistrationCache* cache_ = nullptr;  // none until a location is added
  std::vector<GpuRegistrationCache::Location> found_;
};

}  // namespace iris
