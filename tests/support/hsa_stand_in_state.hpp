// The stand-in's state, shared by its HSA half (hsa_stand_in.cpp) and its HIP half
// (hip_stand_in.cpp): one instance at a time, reached through `stand_in`.
#pragma once

#include <atomic>
#include <bit>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include "tests/support/hsa_stand_in.hpp"

namespace iris::test {

inline constexpr uint64_t kCpuHandle = 1;
inline constexpr uint64_t kGpuHandleBase = 100;
inline constexpr uint64_t kPoolBase = 2000;
inline constexpr uintptr_t kAgentAlias = uintptr_t{1} << 62;  // locked host memory as agents see it
inline constexpr uint64_t kIpcMagic = 0x1215'57a0'd1e5'0001ull;

struct HsaStandIn::State {
  StandInNode node;
  mutable std::mutex mu;
  std::condition_variable cv;
  mutable std::condition_variable idle_cv;
  struct Job {
    std::byte* dst;
    const std::byte* src;
    std::size_t bytes;
    hsa_signal_t signal;
  };
  std::deque<Job> queue;
  bool running = false;  // a job is being copied
  bool stop = false;
  int lose = 0;
  std::vector<hsa_signal_t> lost;
  std::vector<StandInCopy> copies;
  int hung = 0;
  int signals_alive = 0;
  int ipc_opens = 0, ipc_closes = 0;
  struct Allocation {
    std::unique_ptr<std::byte[]> memory;
    std::size_t bytes;
    int device;
  };
  std::map<const std::byte*, Allocation> allocations;
  std::map<const std::byte*, std::size_t> locked;      // host base -> bytes
  std::map<const std::byte*, std::size_t> vmm_mapped;  // VMM imports mapped, by address
  int vmm_reserved = 0;
  int crashes = 0;
  hsa_amd_system_event_callback_t event_handler = nullptr;
  void* event_data = nullptr;
  int gpu_only_signals = 0, interrupt_signals = 0;
  struct VmmOwned {
    int fd;
    std::size_t bytes;
    int device;
    int references;  // the owner's, plus retains where the release takes one
  };
  std::map<const std::byte*, VmmOwned> vmm_owned;  // client-side VMM allocations
  std::set<void*> retained;                        // handles hipMemRetainAllocationHandle gave
  std::thread worker;

  int device_of(hsa_agent_t a) const {
    if (a.handle == kCpuHandle) return -1;
    if (a.handle >= kGpuHandleBase && a.handle < kGpuHandleBase + node.gpus)
      return static_cast<int>(a.handle - kGpuHandleBase);
    return -2;
  }
  // Where the copy really reads or writes; nullptr when the address is not one agents may use
  // (locked host memory by its host address, or memory nobody allocated or locked).
  std::byte* resolve(const void* p, std::size_t bytes) const {
    const auto at = reinterpret_cast<uintptr_t>(p);
    if (at >= kAgentAlias) {
      const auto* host = reinterpret_cast<const std::byte*>(at - kAgentAlias);
      for (const auto& [base, size] : locked)
        if (host >= base && host + bytes <= base + size) return const_cast<std::byte*>(host);
      return nullptr;
    }
    const auto* q = static_cast<const std::byte*>(p);
    for (const auto& [base, a] : allocations)
      if (q >= base && q + bytes <= base + a.bytes) return const_cast<std::byte*>(q);
    // VMM imports: chunks mapped back to back count as one range.
    for (auto it = vmm_mapped.begin(); it != vmm_mapped.end(); ++it) {
      const std::byte* end = it->first + it->second;
      for (auto next = std::next(it); next != vmm_mapped.end() && next->first == end; ++next)
        end += next->second;
      if (q >= it->first && q + bytes <= end) return const_cast<std::byte*>(q);
    }
    return nullptr;
  }
  void run() {
    std::unique_lock lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return stop || !queue.empty(); });
      if (stop) return;
      Job job = queue.front();
      queue.pop_front();
      running = true;
      lock.unlock();
      std::memcpy(job.dst, job.src, job.bytes);
      lock.lock();
      running = false;
      if (lose > 0) {
        --lose;
        lost.push_back(job.signal);
      } else {
        reinterpret_cast<std::atomic<int64_t>*>(job.signal.handle)->fetch_sub(1);
      }
      idle_cv.notify_all();
    }
  }
};

inline HsaStandIn::State* stand_in = nullptr;

// The PCI bus id the stand-in gives GPU `device`.
std::string bus_of(int device);

// Client side: a handle retained from the owner's mapping names the owned allocation.
struct StandInRetained {
  const std::byte* allocation;
};

// Points `hip`'s entry points at the stand-in's HIP half.
void install_hip_stand_in(hip::Runtime& hip);

}  // namespace iris::test
