// GPU memory faults ROCr reports through its system-event handler. Without a handler it aborts
// the process; with one, irisd fails the copies a fault hit and serves everything else. The
// handler runs on a runtime thread and may outlive any engine (ROCm 5.x has no way to take it
// back), so the faults go to one process-wide inbox the engine drains when it polls.
#pragma once

#include <hsa/hsa_ext_amd.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

namespace iris::daemon::hsa {

struct MemoryFault {
  uint64_t agent;  // hsa_agent_t handle of the GPU that faulted
  uint64_t address;
  uint32_t reasons;  // HSA_AMD_MEMORY_FAULT_* bits
};

class MemoryFaults {
 public:
  static MemoryFaults& instance();
  // hsa_amd_system_event_callback_t.
  static hsa_status_t on_system_event(const hsa_amd_event_t* event, void* data);
  // Called on every engine poll: without faults it costs one atomic load, no lock.
  std::vector<MemoryFault> take();

 private:
  std::atomic<bool> pending_{false};  // written under mutex_
  std::mutex mutex_;
  std::vector<MemoryFault> faults_;
};

}  // namespace iris::daemon::hsa
