#include "daemon/engines/hsa/memory_faults.hpp"

namespace iris::daemon::hsa {

MemoryFaults& MemoryFaults::instance() {
  static MemoryFaults faults;
  return faults;
}

hsa_status_t MemoryFaults::on_system_event(const hsa_amd_event_t* event, void*) {
  if (event == nullptr || event->event_type != HSA_AMD_GPU_MEMORY_FAULT_EVENT)
    return HSA_STATUS_SUCCESS;
  MemoryFaults& self = instance();
  std::lock_guard lock(self.mutex_);
  self.faults_.push_back({event->memory_fault.agent.handle, event->memory_fault.virtual_address,
                          event->memory_fault.fault_reason_mask});
  self.pending_.store(true, std::memory_order_release);
  return HSA_STATUS_SUCCESS;
}

std::vector<MemoryFault> MemoryFaults::take() {
  if (!pending_.load(std::memory_order_acquire)) return {};
  std::lock_guard lock(mutex_);
  pending_.store(false, std::memory_order_relaxed);
  return std::exchange(faults_, {});
}

}  // namespace iris::daemon::hsa
