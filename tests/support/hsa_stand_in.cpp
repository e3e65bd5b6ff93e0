#include "tests/support/hsa_stand_in.hpp"

#include <sys/mman.h>
#include <unistd.h>

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

namespace iris::test {

namespace {
constexpr uint64_t kCpuHandle = 1;
constexpr uint64_t kGpuHandleBase = 100;
constexpr uint64_t kPoolBase = 2000;
constexpr uintptr_t kAgentAlias = uintptr_t{1} << 62;  // locked host memory as agents see it
constexpr uint64_t kIpcMagic = 0x1215'57a0'd1e5'0001ull;
}  // namespace

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

namespace {
HsaStandIn::State* g = nullptr;

std::string bus_of(int device) {
  char bus[32];
  std::snprintf(bus, sizeof(bus), "0000:%02X:00.0", 0x0c + 0x10 * device);
  return bus;
}

hsa_status_t queue_copy(void* dst, hsa_agent_t dst_agent, const void* src, hsa_agent_t src_agent,
                        size_t size, hsa_signal_t signal, uint32_t engine, bool forced) {
  std::lock_guard lock(g->mu);
  const int d = g->device_of(dst_agent), s = g->device_of(src_agent);
  if (d == -2 || s == -2) return HSA_STATUS_ERROR_INVALID_AGENT;
  std::byte* to = g->resolve(dst, size);
  std::byte* from = g->resolve(src, size);
  if (to == nullptr || from == nullptr) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  g->copies.push_back({s, d, engine, forced, size});
  if (engine != 0 && (engine & g->node.available(s, d)) == 0) {
    ++g->hung;  // queued on an engine the status did not offer: never finishes
    return HSA_STATUS_SUCCESS;
  }
  g->queue.push_back({to, from, size, signal});
  g->cv.notify_one();
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
  for (int i = 0; i < g->node.gpus; ++i)
    if (hsa_status_t st = callback({kGpuHandleBase + i}, data); st != HSA_STATUS_SUCCESS) return st;
  return HSA_STATUS_SUCCESS;
}
hsa_status_t s_agent_get_info(hsa_agent_t agent, hsa_agent_info_t attribute, void* value) {
  const int device = g->device_of(agent);
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
  const int device = g->device_of(agent);
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
  const int from = g->device_of(agent);
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
  std::lock_guard lock(g->mu);
  ++g->signals_alive;
  ++((attributes & HSA_AMD_SIGNAL_AMD_GPU_ONLY) != 0 ? g->gpu_only_signals : g->interrupt_signals);
  return HSA_STATUS_SUCCESS;
}
hsa_status_t s_signal_destroy(hsa_signal_t signal) {
  delete reinterpret_cast<std::atomic<int64_t>*>(signal.handle);
  std::lock_guard lock(g->mu);
  --g->signals_alive;
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
  *mask = g->node.available(g->device_of(src_agent), g->device_of(dst_agent));
  return *mask == 0 ? HSA_STATUS_ERROR_OUT_OF_RESOURCES : HSA_STATUS_SUCCESS;
}
hsa_status_t s_preferred_engine(hsa_agent_t dst_agent, hsa_agent_t src_agent, uint32_t* mask) {
  *mask = g->node.preferred(g->device_of(src_agent), g->device_of(dst_agent));
  return HSA_STATUS_SUCCESS;
}
hsa_status_t s_memory_lock(void* host, size_t size, hsa_agent_t*, int, void** agent_ptr) {
  std::lock_guard lock(g->mu);
  g->locked[static_cast<const std::byte*>(host)] = size;
  *agent_ptr = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(host) + kAgentAlias);
  return HSA_STATUS_SUCCESS;
}
hsa_status_t s_memory_unlock(void* host) {
  std::lock_guard lock(g->mu);
  return g->locked.erase(static_cast<const std::byte*>(host)) == 1
             ? HSA_STATUS_SUCCESS
             : HSA_STATUS_ERROR_INVALID_ARGUMENT;
}
hsa_status_t s_register_event_handler(hsa_amd_system_event_callback_t callback, void* data) {
  std::lock_guard lock(g->mu);
  g->event_handler = callback;
  g->event_data = data;
  return HSA_STATUS_SUCCESS;
}
hsa_status_t s_allow_access(uint32_t, const hsa_agent_t*, const uint32_t*, const void*) {
  return HSA_STATUS_SUCCESS;
}

// HIP entry points irisd uses.
const char* h_error_string(hipError_t) { return "stand-in HIP error"; }
hipError_t h_runtime_version(int* v) {
  *v = g->node.hip_version;
  return hipSuccess;
}
// CLR 6.x: a stream wait is a one-thread blit kernel unless GPU_STREAMOPS_CP_WAIT is true; then
// it is a command-processor barrier that accepts only signal memory (hipMallocSignalMemory) and
// refuses every other address with hipErrorInvalidValue. The stand-in allocates no signal memory.
hipError_t h_stream_wait(hipStream_t, void*, uint32_t, unsigned, uint32_t) {
  return hip::streamops_cp_wait_requested() ? hipErrorInvalidValue : hipSuccess;
}
hipError_t h_is_capturing(hipStream_t stream, hipStreamCaptureStatus* status) {
  *status = stream == HsaStandIn::capturing_stream() ? hipStreamCaptureStatusActive
                                                     : hipStreamCaptureStatusNone;
  return hipSuccess;
}
hipError_t h_device_count(int* count) {
  *count = g->node.gpus;
  return hipSuccess;
}
hipError_t h_set_device(int device) {
  return device >= 0 && device < g->node.gpus ? hipSuccess : hipErrorInvalidDevice;
}
hipError_t h_bus_id(char* bus, int length, int device) {
  std::snprintf(bus, static_cast<std::size_t>(length), "%s", bus_of(device).c_str());
  return hipSuccess;
}
hipError_t h_open(void** ptr, hipIpcMemHandle_t handle, unsigned int flags) {
  // CLR 6.x accepts only hipIpcMemLazyEnablePeerAccess, which is 0x1 there (0 in 5.x).
  if (flags != (g->node.hip_version >= 60000000 ? 0x1u : 0u)) return hipErrorInvalidValue;
  uint64_t magic = 0;
  std::byte* base = nullptr;
  std::memcpy(&magic, handle.reserved, sizeof(magic));
  std::memcpy(&base, handle.reserved + sizeof(magic), sizeof(base));
  std::lock_guard lock(g->mu);
  if (magic != kIpcMagic || !g->allocations.contains(base)) return hipErrorInvalidValue;
  ++g->ipc_opens;
  *ptr = base;
  return hipSuccess;
}
hipError_t h_close(void*) {
  std::lock_guard lock(g->mu);
  ++g->ipc_closes;
  return hipSuccess;
}
hipError_t h_address_range(hipDeviceptr_t* base, size_t* size, hipDeviceptr_t ptr) {
  std::lock_guard lock(g->mu);
  const auto* p = static_cast<const std::byte*>(ptr);
  for (const auto& [b, a] : g->allocations)
    if (p >= b && p < b + a.bytes) {
      *base = const_cast<std::byte*>(b);
      *size = a.bytes;
      return hipSuccess;
    }
  return hipErrorInvalidValue;
}
// HIP VMM: a reserved range is anonymous PROT_NONE memory; an imported allocation is the file
// descriptor (a memfd in tests), mapped MAP_SHARED into the range as the real runtime maps the
// physical allocation.
struct StandInAllocation {
  int fd;
};
hipError_t h_reserve(void** ptr, size_t size, size_t, void*, unsigned long long) {
  void* p = ::mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return hipErrorOutOfMemory;
  std::lock_guard lock(g->mu);
  ++g->vmm_reserved;
  *ptr = p;
  return hipSuccess;
}
hipError_t h_address_free(void* ptr, size_t size) {
  std::lock_guard lock(g->mu);
  --g->vmm_reserved;
  return ::munmap(ptr, size) == 0 ? hipSuccess : hipErrorInvalidValue;
}
hipError_t h_import(hipMemGenericAllocationHandle_t* handle, void* os_handle,
                    hipMemAllocationHandleType type) {
  if (type != hipMemHandleTypePosixFileDescriptor) return hipErrorInvalidValue;
  const int v = g->node.hip_version;
  int given = 0;
  if (v >= 60000000 && v < 70100000) {
    // 6.0 to 7.0 read the fd through the pointer: a small integer there is no pointer, and the
    // real runtime would fault on it.
    if (reinterpret_cast<uintptr_t>(os_handle) < 4096) {
      std::lock_guard lock(g->mu);
      ++g->crashes;
      return hipErrorInvalidValue;
    }
    given = *static_cast<const int*>(os_handle);
  } else {
    given = static_cast<int>(reinterpret_cast<uintptr_t>(os_handle));
  }
  const int fd = ::dup(given);
  if (fd < 0) return hipErrorInvalidValue;
  *handle = reinterpret_cast<hipMemGenericAllocationHandle_t>(new StandInAllocation{fd});
  return hipSuccess;
}
// Client side: a handle retained from the owner's mapping names the owned allocation.
struct StandInRetained {
  const std::byte* allocation;
};
hipError_t h_retain(hipMemGenericAllocationHandle_t* handle, void* ptr) {
  std::lock_guard lock(g->mu);
  const auto* p = static_cast<const std::byte*>(ptr);
  for (auto& [base, owned] : g->vmm_owned)
    if (p >= base && p < base + owned.bytes && owned.references > 0) {
      if (g->node.hip_version < 60000000) ++owned.references;  // 6.x takes none
      *handle = reinterpret_cast<hipMemGenericAllocationHandle_t>(new StandInRetained{base});
      g->retained.insert(*handle);
      return hipSuccess;
    }
  return hipErrorInvalidValue;
}
hipError_t h_export(void* shareable, hipMemGenericAllocationHandle_t handle,
                    hipMemAllocationHandleType type, unsigned long long) {
  if (type != hipMemHandleTypePosixFileDescriptor) return hipErrorInvalidValue;
  auto* r = reinterpret_cast<StandInRetained*>(handle);
  std::lock_guard lock(g->mu);
  const int fd = ::dup(g->vmm_owned.at(r->allocation).fd);
  *static_cast<uint64_t*>(shareable) = static_cast<uint64_t>(fd);
  return hipSuccess;
}
hipError_t h_release(hipMemGenericAllocationHandle_t handle) {
  std::lock_guard lock(g->mu);
  if (g->retained.erase(handle) == 1) {
    // A handle retained from the owner's mapping: the release drops a reference either way.
    auto* r = reinterpret_cast<StandInRetained*>(handle);
    --g->vmm_owned.at(r->allocation).references;
    delete r;
    return hipSuccess;
  }
  auto* a = reinterpret_cast<StandInAllocation*>(handle);
  ::close(a->fd);
  delete a;
  return hipSuccess;
}
hipError_t h_map(void* ptr, size_t size, size_t offset, hipMemGenericAllocationHandle_t handle,
                 unsigned long long) {
  auto* a = reinterpret_cast<StandInAllocation*>(handle);
  if (::mmap(ptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, a->fd,
             static_cast<off_t>(offset)) == MAP_FAILED)
    return hipErrorInvalidValue;
  std::lock_guard lock(g->mu);
  g->vmm_mapped[static_cast<const std::byte*>(ptr)] = size;
  return hipSuccess;
}
hipError_t h_unmap(void* ptr, size_t size) {
  std::lock_guard lock(g->mu);
  // ROCr unmaps one mapping per call: (ptr, size) must be exactly one of them.
  auto it = g->vmm_mapped.find(static_cast<const std::byte*>(ptr));
  if (it == g->vmm_mapped.end() || it->second != size) return hipErrorInvalidValue;
  g->vmm_mapped.erase(it);
  return ::mmap(ptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED
             ? hipErrorInvalidValue
             : hipSuccess;
}
hipError_t h_set_access(void*, size_t, const hipMemAccessDesc* desc, size_t count) {
  for (size_t i = 0; i < count; ++i)
    if (desc[i].location.type != hipMemLocationTypeDevice || desc[i].location.id < 0 ||
        desc[i].location.id >= g->node.gpus)
      return hipErrorInvalidValue;
  return count == 0 ? hipErrorInvalidValue : hipSuccess;
}
}  // namespace

HsaStandIn::HsaStandIn(StandInNode node) {
  if (g != nullptr) throw std::logic_error("one HsaStandIn at a time");
  g = new State{};
  g->node = std::move(node);
  g->worker = std::thread([] { g->run(); });
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
  if (g->node.copy_on_engine) {
    hsa_.hsa_amd_memory_async_copy_on_engine = s_copy_on_engine;
    hsa_.hsa_amd_memory_copy_engine_status = s_engine_status;
  }
  if (g->node.preferred) hsa_.hsa_amd_memory_get_preferred_copy_engine = s_preferred_engine;
  hip_.hipGetErrorString = h_error_string;
  hip_.hipRuntimeGetVersion = h_runtime_version;
  hip_.hipGetDeviceCount = h_device_count;
  hip_.hipSetDevice = h_set_device;
  hip_.hipDeviceGetPCIBusId = h_bus_id;
  hip_.hipIpcOpenMemHandle = h_open;
  hip_.hipIpcCloseMemHandle = h_close;
  hip_.hipMemGetAddressRange = h_address_range;
  hip_.hipMemAddressReserve = h_reserve;
  hip_.hipMemAddressFree = h_address_free;
  hip_.hipMemImportFromShareableHandle = h_import;
  hip_.hipMemRelease = h_release;
  hip_.hipMemRetainAllocationHandle = h_retain;
  hip_.hipMemExportToShareableHandle = h_export;
  hip_.hipMemMap = h_map;
  hip_.hipMemUnmap = h_unmap;
  hip_.hipMemSetAccess = h_set_access;
  hip_.hipStreamWaitValue32 = h_stream_wait;
  hip_.hipStreamIsCapturing = h_is_capturing;
}

HsaStandIn::~HsaStandIn() {
  {
    std::lock_guard lock(g->mu);
    g->stop = true;
  }
  g->cv.notify_all();
  g->worker.join();
  // On 6.x a retained handle is never released (CLR's retain took no reference to drop); CLR's
  // handle is the allocation itself, the stand-in's a small record freed here.
  for (void* handle : g->retained) delete static_cast<StandInRetained*>(handle);
  delete g;
  g = nullptr;
}

std::byte* HsaStandIn::gpu_alloc(int device, std::size_t bytes) {
  auto memory = std::make_unique<std::byte[]>(bytes);
  std::byte* base = memory.get();
  std::lock_guard lock(g->mu);
  g->allocations[base] = {std::move(memory), bytes, device};
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
  std::lock_guard lock(g->mu);
  g->lose += count;
}

void HsaStandIn::signal_lost_copies() {
  std::lock_guard lock(g->mu);
  for (hsa_signal_t s : g->lost) reinterpret_cast<std::atomic<int64_t>*>(s.handle)->fetch_sub(1);
  g->lost.clear();
}

void HsaStandIn::wait_idle() const {
  std::unique_lock lock(g->mu);
  g->idle_cv.wait(lock, [] { return g->queue.empty() && !g->running; });
}

std::vector<StandInCopy> HsaStandIn::copies() const {
  std::lock_guard lock(g->mu);
  return g->copies;
}
int HsaStandIn::ipc_opens() const {
  std::lock_guard lock(g->mu);
  return g->ipc_opens;
}
int HsaStandIn::ipc_closes() const {
  std::lock_guard lock(g->mu);
  return g->ipc_closes;
}
int HsaStandIn::signals_alive() const {
  std::lock_guard lock(g->mu);
  return g->signals_alive;
}
int HsaStandIn::locked_ranges() const {
  std::lock_guard lock(g->mu);
  return static_cast<int>(g->locked.size());
}
int HsaStandIn::vmm_ranges() const {
  std::lock_guard lock(g->mu);
  return g->vmm_reserved;
}
void HsaStandIn::inject_memory_fault(int device, const void* address) {
  hsa_amd_system_event_callback_t handler = nullptr;
  void* data = nullptr;
  {
    std::lock_guard lock(g->mu);
    handler = g->event_handler;
    data = g->event_data;
    if (handler == nullptr) {
      ++g->crashes;  // ROCr aborts the process when no handler is registered
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
  std::lock_guard lock(g->mu);
  return static_cast<int>(g->vmm_mapped.size());
}
int HsaStandIn::crashes() const {
  std::lock_guard lock(g->mu);
  return g->crashes;
}
int HsaStandIn::gpu_only_signals() const {
  std::lock_guard lock(g->mu);
  return g->gpu_only_signals;
}
int HsaStandIn::interrupt_signals() const {
  std::lock_guard lock(g->mu);
  return g->interrupt_signals;
}
std::byte* HsaStandIn::vmm_alloc(int device, std::size_t bytes) {
  const int fd = ::memfd_create("stand-in-vmm", MFD_CLOEXEC);
  if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(bytes)) != 0)
    throw std::runtime_error("stand-in VMM allocation");
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) throw std::runtime_error("stand-in VMM mapping");
  std::lock_guard lock(g->mu);
  g->vmm_owned[static_cast<std::byte*>(p)] = {fd, bytes, device, 1};
  return static_cast<std::byte*>(p);
}
bool HsaStandIn::vmm_alive(const std::byte* allocation) const {
  std::lock_guard lock(g->mu);
  auto it = g->vmm_owned.find(allocation);
  return it != g->vmm_owned.end() && it->second.references > 0;
}

int HsaStandIn::hung_copies() const {
  std::lock_guard lock(g->mu);
  return g->hung;
}

}  // namespace iris::test
