#include "daemon/engines/cuda/cuda_engine.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

#include <spdlog/spdlog.h>

#include "iris/shared/checked_range.hpp"
#include "iris/shared/descriptor.hpp"

namespace iris::daemon {

std::unique_ptr<CudaEngine> CudaEngine::create(const EngineOptions& options,
                                               const std::string& reason, std::string& why_not) {
  const cuda::Driver* driver = cuda::load_driver(why_not);
  if (driver == nullptr) return nullptr;
  return create(*driver, options, reason, why_not);
}

std::unique_ptr<CudaEngine> CudaEngine::create(const cuda::Driver& driver,
                                               const EngineOptions& options,
                                               const std::string& reason, std::string& why_not) {
  try {
    return std::unique_ptr<CudaEngine>(new CudaEngine(driver, options, reason));
  } catch (const std::exception& e) {
    why_not = e.what();
    return nullptr;
  }
}

CudaEngine::CudaEngine(const cuda::Driver& driver, const EngineOptions& options, std::string reason)
    : Engine(options.inline_bytes),
      cu_(driver),
      event_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
      split_bytes_(options.split_bytes) {
  if (!event_fd_) throw std::runtime_error(std::string("eventfd: ") + std::strerror(errno));
  description_.name = "cuda";
  description_.reason = std::move(reason);
  description_.copy_method =
      std::string(cu_.cuMemcpyBatchAsync != nullptr ? "cuMemcpyBatchAsync" : "cuMemcpyAsync") +
      " on one non-blocking stream per copy engine";
  int version = 0;
  check(cu_.cuDriverGetVersion(&version), "cuDriverGetVersion");
  description_.driver_version =
      "CUDA " + std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
  int count = 0;
  check(cu_.cuDeviceGetCount(&count), "cuDeviceGetCount");
  std::vector<int> engines_per_device;
  for (int i = 0; i < count; ++i) {
    Device d{};
    check(cu_.cuDeviceGet(&d.handle, i), "cuDeviceGet");
    char name[256] = {};
    char bus[64] = {};
    size_t memory = 0;
    int engines = 0;
    check(cu_.cuDeviceGetName(name, sizeof(name), d.handle), "cuDeviceGetName");
    check(cu_.cuDeviceGetPCIBusId(bus, sizeof(bus), d.handle), "cuDeviceGetPCIBusId");
    check(cu_.cuDeviceTotalMem(&memory, d.handle), "cuDeviceTotalMem");
    check(cu_.cuDeviceGetAttribute(&engines, CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, d.handle),
          "cuDeviceGetAttribute(ASYNC_ENGINE_COUNT)");
    check(cu_.cuDevicePrimaryCtxRetain(&d.context, d.handle), "cuDevicePrimaryCtxRetain");
    releases_.push([this, device = d.handle] { cu_.cuDevicePrimaryCtxRelease(device); });
    d.bus_id = bus;
    DeviceDescription desc{name, bus, memory, {}, {}, {}};
    for (int e = 0; e < std::max(engines, 1); ++e)
      desc.engines.push_back({"copy-engine-" + std::to_string(e), static_cast<uint32_t>(e)});
    d.streams.resize(desc.engines.size());
    devices_.push_back(std::move(d));
    description_.devices.push_back(std::move(desc));
  }
  connect_peers();
  // One pinned page holds every stream's retired counter, each on its own cache line.
  std::size_t streams = 0;
  for (const Device& d : devices_) streams += d.streams.size();
  use_device(0);
  check(cu_.cuMemHostAlloc(&retired_words_, std::max<std::size_t>(4096, streams * 64),
                           CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP),
        "cuMemHostAlloc");
  releases_.push([this, words = retired_words_] { cu_.cuMemFreeHost(words); });
  std::memset(retired_words_, 0, std::max<std::size_t>(4096, streams * 64));
  std::size_t next_word = 0;
  for (std::size_t i = 0; i < devices_.size(); ++i) {
    use_device(static_cast<int>(i));
    create_stream(static_cast<int>(i), devices_[i].signal);
    for (Stream& st : devices_[i].streams) {
      create_stream(static_cast<int>(i), st.handle);
      void* word = static_cast<char*>(retired_words_) + 64 * next_word++;
      st.retired = new (word) std::atomic<uint32_t>(0);
      check(cu_.cuMemHostGetDevicePointer(&st.retired_device, word, 0),
            "cuMemHostGetDevicePointer");
    }
  }
  spdlog::info("cuda engine: {} device(s), driver {}", devices_.size(),
               description_.driver_version);
}

CudaEngine::~CudaEngine() = default;

void CudaEngine::stop() {
  // The DMA engines write into imported memory that is closed after this.
  for (std::size_t i = 0; i < devices_.size(); ++i) {
    use_device(static_cast<int>(i));
    for (Stream& st : devices_[i].streams) cu_.cuStreamSynchronize(st.handle);
    cu_.cuStreamSynchronize(devices_[i].signal);
  }
}

void CudaEngine::create_stream(int device, CUstream& stream) {
  check(cu_.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  releases_.push([this, device, stream] {
    use_device(device);
    cu_.cuStreamSynchronize(stream);
    cu_.cuStreamDestroy(stream);
  });
}

void CudaEngine::connect_peers() {
  for (std::size_t i = 0; i < devices_.size(); ++i) {
    for (std::size_t j = 0; j < devices_.size(); ++j) {
      if (i == j) continue;
      int can = 0;
      check(cu_.cuDeviceCanAccessPeer(&can, devices_[i].handle, devices_[j].handle),
            "cuDeviceCanAccessPeer");
      if (can == 0) {
        spdlog::warn(
            "cuda engine: GPU {} cannot reach GPU {} directly; copies between them are "
            "staged through host memory",
            devices_[i].bus_id, devices_[j].bus_id);
        continue;
      }
      use_device(static_cast<int>(i));
      const CUresult r = cu_.cuCtxEnablePeerAccess(devices_[j].context, 0);
      if (r != CUDA_SUCCESS && r != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)
        check(r, "cuCtxEnablePeerAccess");
      devices_[i].peers.push_back(static_cast<int>(j));
      description_.devices[i].peer_bus_ids.push_back(devices_[j].bus_id);
    }
  }
}

void CudaEngine::check(CUresult result, const char* what) const {
  if (result != CUDA_SUCCESS)
    throw Error(ErrorCode::kEngineError, std::string(what) + " failed: " + cu_.describe(result));
}

void CudaEngine::use_device(int index) {
  CUcontext current = nullptr;
  cu_.cuCtxGetCurrent(&current);
  if (current != devices_[index].context) cu_.cuCtxSetCurrent(devices_[index].context);
}

void CudaEngine::submit(std::span<const CopyRequest> copies) {
  // The pieces of one submit that go to one stream form a batch: one cuMemcpyBatchAsync where
  // the driver has it, and one counter write that retires them all. The groups and their
  // vectors are kept from submit to submit, and a batch's pieces come from those retired.
  std::size_t used = 0;
  auto add = [&](int device, Stream* st, CUdeviceptr dst, CUdeviceptr src, size_t bytes,
                 Piece piece) {
    auto g = std::find_if(groups_.begin(), groups_.begin() + static_cast<std::ptrdiff_t>(used),
                          [&](const Group& x) { return x.stream == st; });
    if (g == groups_.begin() + static_cast<std::ptrdiff_t>(used)) {
      if (used == groups_.size()) groups_.emplace_back();
      g = groups_.begin() + static_cast<std::ptrdiff_t>(used++);
      g->device = device;
      g->stream = st;
      g->dsts.clear();
      g->srcs.clear();
      g->sizes.clear();
      g->batch.pieces.clear();
      if (g->batch.pieces.capacity() == 0 && !spare_pieces_.empty()) {
        g->batch.pieces = std::move(spare_pieces_.back());
        spare_pieces_.pop_back();
      }
    }
    g->dsts.push_back(dst);
    g->srcs.push_back(src);
    g->sizes.push_back(bytes);
    g->batch.pieces.push_back(piece);
  };
  for (const CopyRequest& copy : copies) {
    const int device = copy.dst_device != kHostMemory   ? copy.dst_device
                       : copy.src_device != kHostMemory ? copy.src_device
                                                        : 0;
    const TransferPath path =
        within_one_gpu(copy) ? TransferPath::kComputeUnits : TransferPath::kCopyEngine;
    Device& d = devices_[device];
    const CopyCompletion completion{copy.cookie, ErrorCode::kOk, path, copy.bytes};
    const CUdeviceptr dst = address_on(device, copy.dst, copy.dst_device);
    const CUdeviceptr src = address_on(device, copy.src, copy.src_device);
    // The streams this copy may use: with two engines or more the last is kept for latency work.
    const auto all = static_cast<uint32_t>(d.streams.size());
    const uint32_t first = copy.queue == EngineQueue::kLatency && all > 1 ? all - 1 : 0;
    const uint32_t engines = copy.queue == EngineQueue::kAny || all < 2 ? all
                             : copy.queue == EngineQueue::kBulk         ? all - 1
                                                                        : 1;
    if (split_bytes_ == 0 || copy.bytes < split_bytes_ || engines < 2) {
      add(device, &d.streams[first + (engines > 1 ? d.next_stream++ % engines : 0)], dst, src,
          copy.bytes, {completion});
      continue;
    }
    // Pieces of whole 4 KiB pages (the last takes the rest), one per engine.
    const uint64_t piece =
        std::max<uint64_t>(4096, (copy.bytes / engines + 4095) & ~uint64_t{4095});
    const uint64_t id =
        splits_.begin(completion, static_cast<uint32_t>((copy.bytes + piece - 1) / piece));
    for (uint64_t at = 0; at < copy.bytes; at += piece) {
      const uint64_t bytes = std::min(piece, copy.bytes - at);
      add(device, &d.streams[first + d.next_stream++ % engines], dst + at, src + at, bytes,
          {{copy.cookie, ErrorCode::kOk, path, bytes}, id});
    }
  }
  const auto issued_at = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < used; ++i) {
    Group& g = groups_[i];
    use_device(g.device);
    if (!issue(g.stream->handle, g.device, g.dsts, g.srcs, g.sizes)) {
      for (Piece p : g.batch.pieces) {
        p.completion.code = ErrorCode::kEngineError;
        failed_.push_back(p);
      }
      continue;
    }
    Stream& st = *g.stream;
    g.batch.number = ++st.issued;
    g.batch.issued_at = issued_at;
    const CUresult r = cu_.cuStreamWriteValue32(st.handle, st.retired_device, g.batch.number,
                                                CU_STREAM_WRITE_VALUE_DEFAULT);
    if (r != CUDA_SUCCESS) {
      // The copies were issued: wait for them here rather than lose their completions.
      spdlog::error("cuda engine: cuStreamWriteValue32 failed ({}); synchronising the stream",
                    cu_.describe(r));
      cu_.cuStreamSynchronize(st.handle);
      st.retired->store(g.batch.number, std::memory_order_release);
    }
    st.batches.push_back(std::move(g.batch));
    ++in_flight_;
  }
  if (!failed_.empty()) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t w = ::write(event_fd_.get(), &one, sizeof(one));
  }
}

bool CudaEngine::issue(CUstream stream, int device, std::vector<CUdeviceptr>& dsts,
                       std::vector<CUdeviceptr>& srcs, std::vector<size_t>& sizes) {
  if (cu_.cuMemcpyBatchAsync != nullptr && use_batch_ && dsts.size() > 1) {
    CUmemcpyAttributes attrs{};
    attrs.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
    attrs.srcLocHint.type = CU_MEM_LOCATION_TYPE_DEVICE;
    attrs.srcLocHint.id = device;
    attrs.dstLocHint = attrs.srcLocHint;
    attrs.flags = CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE;
    size_t first = 0;
    const CUresult r = cu_.cuMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), dsts.size(),
                                              &attrs, &first, 1, stream);
    if (r == CUDA_SUCCESS) return true;
    spdlog::warn("cuda engine: cuMemcpyBatchAsync failed ({}); using cuMemcpyAsync from now on",
                 cu_.describe(r));
    use_batch_ = false;
  }
  for (std::size_t i = 0; i < dsts.size(); ++i) {
    const CUresult r = cu_.cuMemcpyAsync(dsts[i], srcs[i], sizes[i], stream);
    if (r != CUDA_SUCCESS) {
      spdlog::error("cuda engine: copy of {} bytes on device {} failed: {}", sizes[i], device,
                    cu_.describe(r));
      // Copies before it were issued and will land; the batch is reported failed as a whole
      // only after the stream has finished them.
      cu_.cuStreamSynchronize(stream);
      return false;
    }
  }
  return true;
}

std::size_t CudaEngine::poll(std::vector<CopyCompletion>& out) {
  const std::size_t before = out.size();
  if (!failed_.empty()) {
    for (const Piece& p : failed_) splits_.retire(p.split, p.completion, out);
    failed_.clear();
  }
  if (in_flight_ == 0) return out.size() - before;
  for (Device& d : devices_)
    for (Stream& st : d.streams)
      if (!st.batches.empty()) retire(st, out);
  return out.size() - before;
}

void CudaEngine::retire(Stream& st, std::vector<CopyCompletion>& out) {
  const uint32_t retired = st.retired->load(std::memory_order_acquire);
  std::size_t ended = 0, ended_pieces = 0;
  uint64_t ended_bytes = 0;
  for (const Batch& b : st.batches) {
    if (!shm::generation_reached(retired, b.number)) break;
    ++ended;
    ended_pieces += b.pieces.size();
    for (const Piece& p : b.pieces) ended_bytes += p.completion.bytes;
  }
  if (ended == 0) return;
  // The clock only when something ended: the loop polls here constantly while copies run.
  const auto now = std::chrono::steady_clock::now();
  const auto served_from = std::max(st.batches.front().issued_at, st.last_retired_at);
  const auto served_ns = static_cast<double>(std::max<int64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(now - served_from).count(), 1));
  st.last_retired_at = now;
  for (; ended > 0; --ended) {
    std::vector<Piece>& pieces = st.batches.front().pieces;
    for (Piece& p : pieces) {
      const double share = ended_bytes == 0 ? 1.0 / static_cast<double>(ended_pieces)
                                            : static_cast<double>(p.completion.bytes) /
                                                  static_cast<double>(ended_bytes);
      p.completion.engine_ns = std::max<uint64_t>(1, static_cast<uint64_t>(served_ns * share));
      splits_.retire(p.split, p.completion, out);
    }
    pieces.clear();
    spare_pieces_.push_back(std::move(pieces));
    st.batches.pop_front();
    --in_flight_;
  }
}

void CudaEngine::write_device_word(int device, std::byte* address, uint32_t value) {
  use_device(device);
  check(cu_.cuStreamWriteValue32(devices_[device].signal, reinterpret_cast<CUdeviceptr>(address),
                                 value, CU_STREAM_WRITE_VALUE_DEFAULT),
        "cuStreamWriteValue32 (a stream done flag)");
}

std::shared_ptr<void> CudaEngine::prepare_host_memory(void* base, uint64_t bytes) {
  use_device(0);
  check(cu_.cuMemHostRegister(base, bytes,
                              CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP),
        "cuMemHostRegister (pinning a host buffer)");
  return std::shared_ptr<void>(base, [this](void* p) {
    use_device(0);
    cu_.cuMemHostUnregister(p);
  });
}

ImportedMemory CudaEngine::import_device_memory(const DeviceBufferExport& exported) {
  if (exported.api != DeviceApi::kCuda)
    throw Error(ErrorCode::kInvalidArgument,
                "a HIP (AMD) buffer cannot be imported by the cuda engine: irisd on this node "
                "runs on NVIDIA GPUs");
  if (!exported.vmm_fds.empty()) return import_vmm(exported, device_by_export(exported));
  if (exported.ipc_handle.size() != sizeof(CUipcMemHandle))
    throw Error(ErrorCode::kInvalidArgument,
                "CUDA IPC handle of " + std::to_string(exported.ipc_handle.size()) +
                    " bytes (expected " + std::to_string(sizeof(CUipcMemHandle)) + ")");
  const int device = device_by_export(exported);
  use_device(device);

  std::shared_ptr<Import> opened = imports_[exported.ipc_handle].lock();
  if (!opened) {
    CUipcMemHandle ipc;
    std::memcpy(&ipc, exported.ipc_handle.data(), sizeof(ipc));
    CUdeviceptr base = 0;
    const CUresult r = cu_.cuIpcOpenMemHandle(&base, ipc, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    if (r != CUDA_SUCCESS)
      throw Error(ErrorCode::kInvalidArgument,
                  "cannot import the GPU buffer (cuIpcOpenMemHandle: " + cu_.describe(r) +
                      "); was it allocated with cudaMalloc on " + exported.bus_id + "?");
    size_t size = 0;
    CUdeviceptr start = 0;
    check(cu_.cuMemGetAddressRange(&start, &size, base), "cuMemGetAddressRange");
    opened =
        std::shared_ptr<Import>(new Import{std::vector<CUdeviceptr>(devices_.size()), size, device},
                                [this](Import* o) { close_import(o); });
    opened->base[device] = base;
    // Mapped into each peer's context too: a copy issued on GPU d uses d's mapping (see
    // address_on).
    for (const int d : devices_[device].peers) {
      use_device(d);
      const CUresult rp =
          cu_.cuIpcOpenMemHandle(&opened->base[d], ipc, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
      if (rp != CUDA_SUCCESS) {
        opened->base[d] = 0;
        spdlog::warn(
            "cuda engine: cannot map a buffer of GPU {} for GPU {} ({}); copies between "
            "them go through the host",
            exported.bus_id, devices_[d].bus_id, cu_.describe(rp));
      }
    }
    imports_[exported.ipc_handle] = opened;
    by_address_[base] = opened;
  }
  check_export_range(exported, opened->bytes, "the GPU allocation");
  // Forget imports that have been closed since.
  for (auto it = imports_.begin(); it != imports_.end();)
    it = it->second.expired() ? imports_.erase(it) : std::next(it);
  return ImportedMemory{reinterpret_cast<std::byte*>(opened->base[device]) + exported.offset,
                        exported.bytes, device, opened};
}

int CudaEngine::device_by_export(const DeviceBufferExport& exported) const {
  CUdevice handle;
  if (cu_.cuDeviceGetByPCIBusId(&handle, exported.bus_id.c_str()) != CUDA_SUCCESS)
    throw Error(ErrorCode::kNotFound,
                "no GPU with PCI bus id '" + exported.bus_id + "' is visible to irisd");
  for (std::size_t i = 0; i < devices_.size(); ++i)
    if (devices_[i].handle == handle) return static_cast<int>(i);
  throw Error(ErrorCode::kNotFound, "GPU " + exported.bus_id + " is not managed by irisd");
}

ImportedMemory CudaEngine::import_vmm(const DeviceBufferExport& exported, int device) {
  const uint64_t total = check_vmm_export(exported);
  const auto& chunks = exported.vmm_chunk_bytes;
  use_device(device);
  // One address range, the allocations mapped back to back as in the client; readable and
  // writable from the owner GPU and its peers, so every context uses the same addresses.
  struct VmmImport {
    CUdeviceptr base = 0;
    uint64_t reserved = 0;
    uint64_t mapped = 0;  // bytes mapped from base
  };
  auto unmap = [this, device](VmmImport* v) {
    use_device(device);
    if (v->mapped != 0) cu_.cuMemUnmap(v->base, v->mapped);
    if (v->base != 0) cu_.cuMemAddressFree(v->base, v->reserved);
    delete v;
  };
  std::shared_ptr<VmmImport> vmm(new VmmImport, unmap);
  check(cu_.cuMemAddressReserve(&vmm->base, total, 0, 0, 0), "cuMemAddressReserve");
  vmm->reserved = total;
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    CUmemGenericAllocationHandle handle;
    CUresult r = cu_.cuMemImportFromShareableHandle(
        &handle, reinterpret_cast<void*>(static_cast<uintptr_t>(exported.vmm_fds[i])),
        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (r != CUDA_SUCCESS)
      throw Error(ErrorCode::kInvalidArgument,
                  "cannot import VMM allocation " + std::to_string(i) +
                      " (cuMemImportFromShareableHandle: " + cu_.describe(r) + ")");
    r = cu_.cuMemMap(vmm->base + vmm->mapped, chunks[i], 0, handle, 0);
    cu_.cuMemRelease(handle);  // the mapping keeps the allocation
    if (r != CUDA_SUCCESS)
      throw Error(ErrorCode::kInvalidArgument, "cannot map VMM allocation " + std::to_string(i) +
                                                   " of " + std::to_string(chunks[i]) +
                                                   " bytes (cuMemMap: " + cu_.describe(r) + ")");
    vmm->mapped += chunks[i];
  }
  std::vector<CUmemAccessDesc> access;
  auto grant = [&](int d) {
    CUmemAccessDesc desc{};
    desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    desc.location.id = devices_[d].handle;
    desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    access.push_back(desc);
  };
  grant(device);
  for (const int peer : devices_[device].peers) grant(peer);
  check(cu_.cuMemSetAccess(vmm->base, total, access.data(), access.size()), "cuMemSetAccess");
  return ImportedMemory{reinterpret_cast<std::byte*>(vmm->base) + exported.offset, exported.bytes,
                        device, vmm};
}

void CudaEngine::close_import(Import* import) {
  by_address_.erase(import->base[import->owner]);
  for (std::size_t d = 0; d < import->base.size(); ++d) {
    if (import->base[d] == 0) continue;
    use_device(static_cast<int>(d));
    cu_.cuIpcCloseMemHandle(import->base[d]);
  }
  delete import;
}

CUdeviceptr CudaEngine::address_on(int device, const std::byte* address, int owner) const {
  const auto p = reinterpret_cast<CUdeviceptr>(address);
  if (owner == kHostMemory || owner == device) return p;
  auto it = by_address_.upper_bound(p);
  if (it == by_address_.begin()) return p;
  --it;
  const std::shared_ptr<Import> import = it->second.lock();
  if (!import || p - it->first >= import->bytes || import->base[device] == 0) return p;
  return import->base[device] + (p - it->first);
}

}  // namespace iris::daemon
