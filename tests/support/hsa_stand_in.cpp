#include "tests/support/hsa_stand_in.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "tests/support/hsa_stand_in_state.hpp"

namespace iris::test {

std::string bus_of(int device) {
  char bus[32];
  std::snprintf(bus, sizeof(bus), "0000:%02X:00.0", 0x0c + 0x10 * device);
  return bus;
}

namespace {
hsa_status_t queue_copy(void* dst, hsa_agent_t dst_agent, const void* src, hsa_agent_t src_agent,
                        size_t size, hsa_signal_t signal, uint32_t engine, bool forced) {
  std::lock_guard lock(stand_in->mu);
  const int d = stand_in->device_of(dst_agent), s = stand_in->device_of(src_agent);
  if (d == -2 || s == -2) return HSA_STATUS_ERROR_INVALID_AGENT;
  std::byte* to = stand_in->resolve(dst, size);
  std::byte* from = stand_in->resolve(src, size);
  if (to == nullptr || from == nullptr) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  stand_in->copies.push_back({s, d, engine, forced, size});
  if (engine != 0 && (engine & stand_in->node.available(s, d)) == 0) {
    ++stand_in->hung;  // queued on an engine the status did not offer: never finishes
    return HSA_STATUS_SUCCESS;
  }
  stand_in->queue.push_back({to, from, size, signal});
  stand_in->cv.notify_one();
  return HSA_STATUS_SUCCESS;
}

// HSA entry points.
hsa_status_t s_init() { return HSA_STATUS_SUCCESS; }
hsa_status_t s_shut_down() { return HSA_STATUS_SUCCESS; }
hsa_status_t s_status_string(hsa_status_t, const char** text) {
  *text = "stand-in HSA status";
  return HSA_STATUS_SUCCESS;
}
hsa_status_t s_system_get_info(hsa_system_info_t attribute, void* value) {
  if (attribute == HSA_SYSTEM_INFO_VERSION_MAJOR)
    *static_cast<uint16_t*>(value) = 1;
  else if (attribute == HSA_SYSTEM_INFO_VERSION_MINOR)
    *static_cast<uint16_t*>(value) = 14;
  else
    return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  return HSA_STATUS_SUCCESS;
}
hsa_status_t s_iterate_agents(hsa_status_t (*callback)(hsa_agent_t, void*), void* data) {
  if (hsa_status_t st = callback({kCpuHandle}, data); st != HSA_STATUS_SUCCESS) return st;
  for (int i = 0; i < stand_in->node.gpus; ++i)
    if (hsa_status_t st = callback({kGpuHandleBase + i}, data); st != HSA_STATUS_SUCCESS) return st;
  return HSA_STATUS_SUCCESS;
}
hsa_status_t s_agent_get_info(hsa_agent_t agent, hsa_agent_info_t attribute, void* value) {
  const int device = stand_in->device_of(agent);
  if (device == -2) return HSA_STATUS_ERROR_INVALID_AGENT;
  const auto amd = static_cast<uint32_t>(attribute);
  if (attribute == HSA_AGENT_INFO_DEVICE) {
    *static_cast<hsa_device_type_t*>(value) =
        device < 0 ? HSA_DEVICE_TYPE_CPU : HSA_DEVICE_TYPE_GPU;
  } else if (attribute == HSA_AGENT_INFO_NAME) {
    std::snprintf(static_cast<char*>(value), 64, "%s", device < 0 ? "cpu" : "gfx942");
  } else if (amd == HSA_AMD_AGENT_INFO_PRODUCT_NAME) {
    std::snprintf(static_cast<char*>(value), 64, "AMD Instinct MI300X (stand-in)");
  } else if (amd == HSA_AMD_AGENT_INFO_BDFID && device >= 0) {
    *static_cast<uint32_t*>(value) = static_cast<uint32_t>(0x0c + 0x10 * device) << 8;
  } else if (attribute == daemon::hsa::kAgentInfoDomain) {
    *static_cast<uint32_t*>(value) = 0;
  } else {
    return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
  return HSA_STATUS_SUCCESS;
}
hsa_status_t s_iterate_memory_pools(hsa_agent_t agent,
                                    hsa_status_t (*callback)(hsa_amd_memory_pool_t, void*),
                                    void* data) {
  const int device = stand_in->device_of(agent);
  if (device == -2) return HSA_STATUS_ERROR_INVALID_AGENT;
  const hsa_status_t st = callback({kPoolBase + static_cast<uint64_t>(device + 1)}, data);
  return st == HSA_STATUS_INFO_BREAK ? HSA_STATUS_SUCCESS : st;
}
hsa_status_t s_pool_get_info(hsa_amd_memory_pool_t, hsa_amd_memory_pool_info_t attribute,
                             void* value) {
  if (attribute == HSA_AMD_MEMORY_POOL_INFO_SEGMENT)
    *static_cast<hsa_amd_segment_t*>(value) = HSA_AMD_SEGMENT_GLOBAL;
  else if (attribute == HSA_AMD_MEMORY_POOL_INFO_SIZE)
    *static_cast<size_t*>(value) = size_t{192} << 30;
  else
    return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  return HSA_STATUS_SUCCESS;
}
hsa_status_t s_agent_pool_get_info(hsa_agent_t agent, hsa_amd_memory_pool_t pool,
                                   hsa_amd_agent_memory_pool_info_t attribute, void* value) {
  const int from = stand_in->device_of(agent);
  const int to = static_cast<int>(pool.handle - kPoolBase) - 1;
  const bool peer = from >= 0 && to >= 0 && from != to;
  if (attribute == HSA_AMD_AGENT_MEMORY_POOL_INFO_NUM_LINK_HOPS) {
    *static_cast<uint32_t*>(value) = peer ? 1 : 0;
  } else if (attribute == HSA_AMD_AGENT_MEMORY_POOL_INFO_LINK_INFO) {
    if (!peer) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    auto* info = static_cast<hsa_amd_memory_pool_link_info_t*>(value);
    *info = {};
    info->link_type = HSA_AMD_LINK_INFO_TYPE_XGMI;
  } else {
    return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
  return HSA_STATUS_SUCCESS;
}
hsa_status_t s_amd_signal_create(hsa_signal_value_t initial, uint32_t, const hsa_agent_t*,
                                 uint64_t attributes, hsa_signal_t* signal) {
  signal->handle = reinterpret_cast<uint64_t>(new std::atomic<int64_t>(initial));
  std::lock_guard lock(stand_in->mu);
  ++stand_in->signals_alive;
  ++((attributes & HSA_AMD_SIGNAL_AMD_GPU_ONLY) != 0 ? stand_in->gpu_only_signals
                                                     : stand_in->interrupt_signals);
  return HSA_STATUS_SUCCESS;
}
hsa_status_t s_signal_destroy(hsa_signal_t signal) {
  delete reinterpret_cast<std::atomic<int64_t>*>(signal.handle);
  std::lock_guard lock(stand_in->mu);
  --stand_in->signals_alive;
  return HSA_STATUS_SUCCESS;
}
void s_signal_store(hsa_signal_t signal, hsa_signal_value_t value) {
  reinterpret_cast<std::atomic<int64_t>*>(signal.handle)->store(value, std::memory_order_release);
}
hsa_signal_value_t s_signal_load(hsa_signal_t signal) {
  return reinterpret_cast<std::atomic<int64_t>*>(signal.handle)->load(std::memory_order_acquire);
}
hsa_status_t s_async_copy(void* dst, hsa_agent_t dst_agent, const void* src, hsa_agent_t src_agent,
                          size_t size, uint32_t, const hsa_signal_t*, hsa_signal_t signal) {
  return queue_copy(dst, dst_agent, src, src_agent, size, signal, 0, false);
}
hsa_status_t s_copy_on_engine(void* dst, hsa_agent_t dst_agent, const void* src,
                              hsa_agent_t src_agent, size_t size, uint32_t, const hsa_signal_t*,
                              hsa_signal_t signal, uint32_t engine, bool force) {
  if (std::popcount(engine) != 1) return HSA_STATUS_ERROR_INVALID_ARGUMENT;  // as ROCr checks
  return queue_copy(dst, dst_agent, src, src_agent, size, signal, engine, force);
}
hsa_status_t s_engine_status(hsa_agent_t dst_agent, hsa_agent_t src_agent, uint32_t* mask) {
  if (dst_agent.handle == src_agent.handle) return HSA_STATUS_ERROR_INVALID_AGENT;  // as ROCr
  *mask = stand_in->node.available(stand_in->device_of(src_agent), stand_in->device_of(dst_agent));
  return *mask == 0 ? HSA_STATUS_ERROR_OUT_OF_RESOURCES : HSA_STATUS_SUCCESS;
}
hsa_status_t s_preferred_engine(hsa_agent_t dst_agent, hsa_agent_t src_agent, uint32_t* mask) {
  *mask = stand_in->node.preferred(stand_in->device_of(src_agent), stand_in->device_of(dst_agent));
  return HSA_STATUS_SUCCESS;
}
hsa_status_t s_memory_lock(void* host, size_t size, hsa_agent_t*, int, void** agent_ptr) {
  std::lock_guard lock(stand_in->mu);
  stand_in->locked[static_cast<const std::byte*>(host)] = size;
  *agent_ptr = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(host) + kAgentAlias);
  return HSA_STATUS_SUCCESS;
}
hsa_status_t s_memory_unlock(void* host) {
  std::lock_guard lock(stand_in->mu);
  return stand_in->locked.erase(static_cast<const std::byte*>(host)) == 1
             ? HSA_STATUS_SUCCESS
             : HSA_STATUS_ERROR_INVALID_ARGUMENT;
}
hsa_status_t s_register_event_handler(hsa_amd_system_event_callback_t callback, void* data) {
  std::lock_guard lock(stand_in->mu);
  stand_in->event_handler = callback;
  stand_in->event_data = data;
  return HSA_STATUS_SUCCESS;
}
hsa_status_t s_allow_access(uint32_t, const hsa_agent_t*, const uint32_t*, const void*) {
  return HSA_STATUS_SUCCESS;
}

}  // namespace
HsaStandIn::HsaStandIn(StandInNode node) {
  if (stand_in != nullptr) throw std::logic_error("one HsaStandIn at a time");
  stand_in = new State{};
  stand_in->node = std::move(node);
  stand_in->worker = std::thread([] { stand_in->run(); });
  hsa_.hsa_init = s_init;
  hsa_.hsa_shut_down = s_shut_down;
  hsa_.hsa_status_string = s_status_string;
  hsa_.hsa_system_get_info = s_system_get_info;
  hsa_.hsa_iterate_agents = s_iterate_agents;
  hsa_.hsa_agent_get_info = s_agent_get_info;
  hsa_.hsa_amd_agent_iterate_memory_pools = s_iterate_memory_pools;
  hsa_.hsa_amd_memory_pool_get_info = s_pool_get_info;
  hsa_.hsa_amd_agent_memory_pool_get_info = s_agent_pool_get_info;
  hsa_.hsa_amd_signal_create = s_amd_signal_create;
  hsa_.hsa_amd_register_system_event_handler = s_register_event_handler;
  hsa_.hsa_signal_destroy = s_signal_destroy;
  hsa_.hsa_signal_store_screlease = s_signal_store;
  hsa_.hsa_signal_load_scacquire = s_signal_load;
  hsa_.hsa_amd_memory_async_copy = s_async_copy;
  hsa_.hsa_amd_memory_lock = s_memory_lock;
  hsa_.hsa_amd_memory_unlock = s_memory_unlock;
  hsa_.hsa_amd_agents_allow_access = s_allow_access;
  if (stand_in->node.copy_on_engine) {
    hsa_.hsa_amd_memory_async_copy_on_engine = s_copy_on_engine;
    hsa_.hsa_amd_memory_copy_engine_status = s_engine_status;
  }
  if (stand_in->node.preferred) hsa_.hsa_amd_memory_get_preferred_copy_engine = s_preferred_engine;
  install_hip_stand_in(hip_);
}

HsaStandIn::~HsaStandIn() {
  {
    std::lock_guard lock(stand_in->mu);
    stand_in->stop = true;
  }
  stand_in->cv.notify_all();
  stand_in->worker.join();
  // On 6.x a retained handle is never released (CLR's retain took no reference to drop); CLR's
  // handle is the allocation itself, the stand-in's a small record freed here.
  for (void* handle : stand_in->retained) delete static_cast<StandInRetained*>(handle);
  delete stand_in;
  stand_in = nullptr;
}

std::byte* HsaStandIn::gpu_alloc(int device, std::size_t bytes) {
  auto memory = std::make_unique<std::byte[]>(bytes);
  std::byte* base = memory.get();
  std::lock_guard lock(stand_in->mu);
  stand_in->allocations[base] = {std::move(memory), bytes, device};
  return base;
}

std::string HsaStandIn::ipc_handle(const std::byte* allocation) const {
  hipIpcMemHandle_t handle{};
  std::memcpy(handle.reserved, &kIpcMagic, sizeof(kIpcMagic));
  std::memcpy(handle.reserved + sizeof(kIpcMagic), &allocation, sizeof(allocation));
  return std::string(handle.reserved, sizeof(handle.reserved));
}

std::string HsaStandIn::bus_id(int device) const { return bus_of(device); }

void HsaStandIn::lose_next_signals(int count) {
  std::lock_guard lock(stand_in->mu);
  stand_in->lose += count;
}

void HsaStandIn::signal_lost_copies() {
  std::lock_guard lock(stand_in->mu);
  for (hsa_signal_t s : stand_in->lost)
    reinterpret_cast<std::atomic<int64_t>*>(s.handle)->fetch_sub(1);
  stand_in->lost.clear();
}

void HsaStandIn::wait_idle() const {
  std::unique_lock lock(stand_in->mu);
  stand_in->idle_cv.wait(lock, [] { return stand_in->queue.empty() && !stand_in->running; });
}

std::vector<StandInCopy> HsaStandIn::copies() const {
  std::lock_guard lock(stand_in->mu);
  return stand_in->copies;
}
int HsaStandIn::ipc_opens() const {
  std::lock_guard lock(stand_in->mu);
  return stand_in->ipc_opens;
}
int HsaStandIn::ipc_closes() const {
  std::lock_guard lock(stand_in->mu);
  return stand_in->ipc_closes;
}
int HsaStandIn::signals_alive() const {
  std::lock_guard lock(stand_in->mu);
  return stand_in->signals_alive;
}
int HsaStandIn::locked_ranges() const {
  std::lock_guard lock(stand_in->mu);
  return static_cast<int>(stand_in->locked.size());
}
int HsaStandIn::vmm_ranges() const {
  std::lock_guard lock(stand_in->mu);
  return stand_in->vmm_reserved;
}
void HsaStandIn::inject_memory_fault(int device, const void* address) {
  hsa_amd_system_event_callback_t handler = nullptr;
  void* data = nullptr;
  {
    std::lock_guard lock(stand_in->mu);
    handler = stand_in->event_handler;
    data = stand_in->event_data;
    if (handler == nullptr) {
      ++stand_in->crashes;  // ROCr aborts the process when no handler is registered
      return;
    }
  }
  hsa_amd_event_t event{};
  event.event_type = HSA_AMD_GPU_MEMORY_FAULT_EVENT;
  event.memory_fault.agent = {kGpuHandleBase + static_cast<uint64_t>(device)};
  event.memory_fault.virtual_address = reinterpret_cast<uint64_t>(address);
  event.memory_fault.fault_reason_mask = HSA_AMD_MEMORY_FAULT_PAGE_NOT_PRESENT;
  handler(&event, data);
}

int HsaStandIn::vmm_mappings() const {
  std::lock_guard lock(stand_in->mu);
  return static_cast<int>(stand_in->vmm_mapped.size());
}
int HsaStandIn::crashes() const {
  std::lock_guard lock(stand_in->mu);
  return stand_in->crashes;
}
int HsaStandIn::gpu_only_signals() const {
  std::lock_guard lock(stand_in->mu);
  return stand_in->gpu_only_signals;
}
int HsaStandIn::interrupt_signals() const {
  std::lock_guard lock(stand_in->mu);
  return stand_in->interrupt_signals;
}
std::byte* HsaStandIn::vmm_alloc(int device, std::size_t bytes) {
  const int fd = ::memfd_create("stand-in-vmm", MFD_CLOEXEC);
  if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(bytes)) != 0)
    throw std::runtime_error("stand-in VMM allocation");
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) throw std::runtime_error("stand-in VMM mapping");
  std::lock_guard lock(stand_in->mu);
  stand_in->vmm_owned[static_cast<std::byte*>(p)] = {fd, bytes, device, 1};
  return static_cast<std::byte*>(p);
}
bool HsaStandIn::vmm_alive(const std::byte* allocation) const {
  std::lock_guard lock(stand_in->mu);
  auto it = stand_in->vmm_owned.find(allocation);
  return it != stand_in->vmm_owned.end() && it->second.references > 0;
}

int HsaStandIn::hung_copies() const {
  std::lock_guard lock(stand_in->mu);
  return stand_in->hung;
}

}  // namespace iris::test
