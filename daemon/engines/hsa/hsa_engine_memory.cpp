// HsaEngine's memory side: host memory locked for the GPUs' engines, GPU memory imported from
// other processes (HIP IPC handles, VMM file descriptors), and the device words (done flags) it
// writes through a locked staging page on an SDMA engine.
#include "daemon/engines/hsa/hsa_engine.hpp"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <spdlog/spdlog.h>

#include "daemon/engines/hsa/memory_faults.hpp"

namespace iris::daemon {

namespace {
constexpr std::size_t kStagingWordsPerBlock = 1024;  // one locked page of 4-byte flag values
}  // namespace

void* HsaEngine::lock_for_gpus(void* host, uint64_t bytes, const char* what) {
  void* agent_ptr = nullptr;
  const hsa_status_t st = hsa_.hsa_amd_memory_lock(
      host, bytes, gpu_agents_.data(), static_cast<int>(gpu_agents_.size()), &agent_ptr);
  if (st != HSA_STATUS_SUCCESS)
    throw Error(ErrorCode::kEngineError, std::string("hsa_amd_memory_lock (") + what + ", " +
                                             std::to_string(bytes) +
                                             " bytes) failed: " + hsa_.describe(st));
  return agent_ptr;
}

std::shared_ptr<void> HsaEngine::prepare_host_memory(void* base, uint64_t bytes) {
  void* agent_ptr = lock_for_gpus(base, bytes, "pinning a host buffer");
  auto* host = static_cast<std::byte*>(base);
  locked_[host] = {bytes, static_cast<std::byte*>(agent_ptr)};
  return std::shared_ptr<void>(base, [this, host](void* p) {
    locked_.erase(host);
    hsa_.hsa_amd_memory_unlock(p);
  });
}

void HsaEngine::check_runtime_match(const DeviceBufferExport& exported) const {
  if (exported.runtime_version == 0 || hip_behaviour_.version == 0) return;
  const hip::Behaviour client = hip::behaviour_of(static_cast<int>(exported.runtime_version));
  // ROCr 6.1 moved IPC to dma-buf (the fd travels over an abstract socket named after the
  // exporter's pid); a runtime before it and one after cannot import each other's memory.
  const bool client_dmabuf = client.version >= 60100000;
  const bool ours_dmabuf = hip_behaviour_.version >= 60100000;
  if (client_dmabuf != ours_dmabuf)
    throw Error(ErrorCode::kInvalidArgument,
                "this process runs HIP " + client.text + " and irisd HIP " + hip_behaviour_.text +
                    ": GPU memory cannot pass between ROCm before 6.1 and 6.1 or later (IPC "
                    "changed to dma-buf). Run the job on the node's ROCm (a PyTorch wheel may "
                    "bundle its own; check torch.version.hip), or irisd on the job's");
  if (client.version / 100000 != hip_behaviour_.version / 100000)
    spdlog::warn(
        "hsa engine: a client runs HIP {} and irisd HIP {}; imports work across these, "
        "but keep them one ROCm release",
        client.text, hip_behaviour_.text);
}

ImportedMemory HsaEngine::import_device_memory(const DeviceBufferExport& exported) {
  if (exported.api != DeviceApi::kHip)
    throw Error(ErrorCode::kInvalidArgument,
                "a CUDA (NVIDIA) buffer cannot be imported by the hsa engine: irisd on this node "
                "runs on AMD GPUs");
  if (hip_ == nullptr)
    throw Error(ErrorCode::kUnavailable,
                "irisd could not load the HIP runtime (libamdhip64), which imports GPU buffers: "
                "install ROCm's HIP runtime on this node and restart irisd");
  check_runtime_match(exported);
  if (!exported.vmm_fds.empty()) return import_vmm(exported, device_by_bus_id(exported.bus_id));
  if (exported.ipc_handle.size() != sizeof(hipIpcMemHandle_t))
    throw Error(ErrorCode::kInvalidArgument,
                "HIP IPC handle of " + std::to_string(exported.ipc_handle.size()) +
                    " bytes (expected " + std::to_string(sizeof(hipIpcMemHandle_t)) + ")");
  const int device = device_by_bus_id(exported.bus_id);
  std::shared_ptr<Import> opened;
  if (auto it = imports_.find(exported.ipc_handle); it != imports_.end())
    opened = it->second.lock();
  if (!opened) {
    if (gpus_[device].hip_device < 0)
      throw Error(ErrorCode::kNotFound, "the HIP runtime does not see GPU " + exported.bus_id +
                                            " (HIP_VISIBLE_DEVICES?)");
    hipError_t r = hip_->hipSetDevice(gpus_[device].hip_device);
    hipIpcMemHandle_t handle;
    std::memcpy(&handle, exported.ipc_handle.data(), sizeof(handle));
    void* base = nullptr;
    if (r == hipSuccess)
      r = hip_->hipIpcOpenMemHandle(&base, handle, hip_behaviour_.ipc_lazy_peer_access_flag);
    if (r != hipSuccess)
      throw Error(ErrorCode::kInvalidArgument,
                  "cannot import the GPU buffer (hipIpcOpenMemHandle): " + hip_->describe(r) +
                      "; the exporting process must be alive and the buffer from hipMalloc");
    hipDeviceptr_t range_base = nullptr;
    size_t size = 0;
    r = hip_->hipMemGetAddressRange(&range_base, &size, base);
    if (r != hipSuccess) {
      [[maybe_unused]] const hipError_t closed = hip_->hipIpcCloseMemHandle(base);
      throw Error(ErrorCode::kEngineError,
                  "hipMemGetAddressRange of an imported buffer failed: " + hip_->describe(r));
    }
    // Every GPU's engines may copy to or from it (the source GPU's engines run peer copies).
    const hsa_status_t st = hsa_.hsa_amd_agents_allow_access(
        static_cast<uint32_t>(gpu_agents_.size()), gpu_agents_.data(), nullptr, base);
    if (st != HSA_STATUS_SUCCESS)
      spdlog::warn("hsa engine: hsa_amd_agents_allow_access on an imported buffer: {}",
                   hsa_.describe(st));
    const hip::Runtime* hip = hip_;
    opened = std::shared_ptr<Import>(
        new Import{static_cast<std::byte*>(base), size, device}, [hip](Import* i) {
          if (const hipError_t r = hip->hipIpcCloseMemHandle(i->base); r != hipSuccess)
            spdlog::warn("hsa engine: hipIpcCloseMemHandle: {}", hip->describe(r));
          delete i;
        });
    imports_[exported.ipc_handle] = opened;
  }
  check_export_range(exported, opened->bytes, "the GPU allocation");
  for (auto it = imports_.begin(); it != imports_.end();)
    it = it->second.expired() ? imports_.erase(it) : std::next(it);
  return ImportedMemory{opened->base + exported.offset, exported.bytes, device, opened};
}

ImportedMemory HsaEngine::import_vmm(const DeviceBufferExport& exported, int device) {
  const uint64_t total = check_vmm_export(exported);
  const auto& chunks = exported.vmm_chunk_bytes;
  auto check = [this](hipError_t r, const std::string& what) {
    if (r != hipSuccess)
      throw Error(ErrorCode::kInvalidArgument, what + " failed: " + hip_->describe(r));
  };
  check(hip_->hipSetDevice(std::max(gpus_[device].hip_device, 0)), "hipSetDevice");
  struct VmmImport {
    void* base = nullptr;
    uint64_t reserved = 0;
    uint64_t mapped = 0;            // bytes mapped from base
    std::vector<uint64_t> mapping;  // each hipMemMap's size, in order
  };
  const hip::Runtime* hip = hip_;
  std::shared_ptr<VmmImport> vmm(new VmmImport, [hip](VmmImport* v) {
    // ROCr unmaps one mapping per call: unmapping the whole range at once would leave every
    // allocation after the first mapped, and the exporter's VRAM held.
    uint64_t at = 0;
    for (uint64_t bytes : v->mapping) {
      if (const hipError_t r = hip->hipMemUnmap(static_cast<std::byte*>(v->base) + at, bytes);
          r != hipSuccess)
        spdlog::warn("hsa engine: hipMemUnmap of a VMM import: {}", hip->describe(r));
      at += bytes;
    }
    if (v->base != nullptr) static_cast<void>(hip->hipMemAddressFree(v->base, v->reserved));
    delete v;
  });
  check(hip_->hipMemAddressReserve(&vmm->base, total, 0, nullptr, 0), "hipMemAddressReserve");
  vmm->reserved = total;
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    hipMemGenericAllocationHandle_t handle{};
    // 6.0 to 7.0 read the fd through osHandle as a pointer; other releases take it by value.
    int fd = exported.vmm_fds[i];
    void* os_handle = hip_behaviour_.import_fd_by_pointer
                          ? static_cast<void*>(&fd)
                          : reinterpret_cast<void*>(static_cast<uintptr_t>(fd));
    check(hip_->hipMemImportFromShareableHandle(&handle, os_handle,
                                                hipMemHandleTypePosixFileDescriptor),
          "importing VMM allocation " + std::to_string(i) + " (hipMemImportFromShareableHandle)");
    const hipError_t r =
        hip_->hipMemMap(static_cast<std::byte*>(vmm->base) + vmm->mapped, chunks[i], 0, handle, 0);
    static_cast<void>(hip_->hipMemRelease(handle));  // the mapping keeps the allocation
    check(r, "mapping VMM allocation " + std::to_string(i) + " of " + std::to_string(chunks[i]) +
                 " bytes (hipMemMap)");
    vmm->mapped += chunks[i];
    vmm->mapping.push_back(chunks[i]);
  }
  // Every GPU's engines may copy to or from it (the source GPU's engines run peer copies).
  std::vector<hipMemAccessDesc> access;
  for (const Gpu& g : gpus_) {
    if (g.hip_device < 0) continue;
    hipMemAccessDesc desc{};
    desc.location.type = hipMemLocationTypeDevice;
    desc.location.id = g.hip_device;
    desc.flags = hipMemAccessFlagsProtReadWrite;
    access.push_back(desc);
  }
  check(hip_->hipMemSetAccess(vmm->base, total, access.data(), access.size()), "hipMemSetAccess");
  return ImportedMemory{static_cast<std::byte*>(vmm->base) + exported.offset, exported.bytes,
                        device, vmm};
}

int64_t HsaEngine::take_staging_word() {
  if (free_staging_.empty()) {
    void* page = std::aligned_alloc(4096, kStagingWordsPerBlock * sizeof(uint32_t));
    if (page == nullptr) throw Error(ErrorCode::kEngineError, "out of memory for flag staging");
    void* agent_ptr = nullptr;
    try {
      agent_ptr = lock_for_gpus(page, kStagingWordsPerBlock * sizeof(uint32_t), "flag staging");
    } catch (...) {
      std::free(page);
      throw;
    }
    const int64_t block = static_cast<int64_t>(staging_blocks_.size());
    staging_blocks_.push_back({static_cast<uint32_t*>(page), static_cast<uint32_t*>(agent_ptr)});
    for (std::size_t w = kStagingWordsPerBlock; w-- > 0;)
      free_staging_.push_back(block * static_cast<int64_t>(kStagingWordsPerBlock) +
                              static_cast<int64_t>(w));
  }
  const int64_t word = free_staging_.back();
  free_staging_.pop_back();
  return word;
}

void HsaEngine::write_device_word(int device, std::byte* address, uint32_t value) {
  const hsa_signal_t signal = signals_.acquire();
  int64_t word = 0;
  try {
    word = take_staging_word();
  } catch (...) {
    signals_.release(signal);
    throw;
  }
  const StagingBlock& block = staging_blocks_[word / kStagingWordsPerBlock];
  const std::size_t at = word % kStagingWordsPerBlock;
  block.host[at] = value;
  const hsa_status_t st = hsa_.hsa_amd_memory_async_copy(
      address, agent_of(device), block.agent + at, cpu_, sizeof(uint32_t), 0, nullptr, signal);
  if (st != HSA_STATUS_SUCCESS) {
    signals_.release(signal);
    free_staging_.push_back(word);
    throw Error(ErrorCode::kEngineError,
                "hsa_amd_memory_async_copy (a stream done flag): " + hsa_.describe(st));
  }
  InFlight f{signal, {0, 0, sizeof(uint32_t), device, 0}, 0, {}, deadline_for(0)};
  f.staging = word;
  in_flight_.push_back(f);
}

}  // namespace iris::daemon
