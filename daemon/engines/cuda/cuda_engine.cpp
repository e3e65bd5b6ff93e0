#include "daemon/engines/cuda/cuda_engine.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

namespace iris::daemon {

std::unique_ptr<CudaEngine> CudaEngine::create(const EngineOptions& options,
                                               const std::string& reason, std::string& why_not) {
  const cuda::Driver* driver = cuda::load_driver(why_not);
  if (driver == nullptr) return nullptr;
  try {
    return std::unique_ptr<CudaEngine>(new CudaEngine(*driver, reason));
  } catch (const std::exception& e) {
    why_not = e.what();
    return nullptr;
  }
}

CudaEngine::CudaEngine(const cuda::Driver& driver, std::string reason)
    : cu_(driver), event_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  if (!event_fd_) throw std::runtime_error(std::string("eventfd: ") + std::strerror(errno));
  description_.name = "cuda";
  description_.reason = std::move(reason);
  int version = 0;
  check(cu_.cuDriverGetVersion(&version), "cuDriverGetVersion");
  description_.driver_version =
      "CUDA " + std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
  int count = 0;
  check(cu_.cuDeviceGetCount(&count), "cuDeviceGetCount");
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
    check(cu_.cuCtxSetCurrent(d.context), "cuCtxSetCurrent");
    d.bus_id = bus;
    DeviceDescription desc{name, bus, memory, {}};
    for (int e = 0; e < std::max(engines, 1); ++e) {
      CUstream stream = nullptr;
      check(cu_.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
      d.streams.push_back(stream);
      desc.engines.push_back({"copy-engine-" + std::to_string(e), static_cast<uint32_t>(e)});
    }
    devices_.push_back(std::move(d));
    description_.devices.push_back(std::move(desc));
  }
  spdlog::info("cuda engine: {} device(s), driver {}", devices_.size(),
               description_.driver_version);
}

CudaEngine::~CudaEngine() {
  for (std::size_t i = 0; i < devices_.size(); ++i) {
    use_device(static_cast<int>(i));
    for (CUstream s : devices_[i].streams) {
      cu_.cuStreamSynchronize(s);  // runs the host functions still queued
      cu_.cuStreamDestroy(s);
    }
    cu_.cuDevicePrimaryCtxRelease(devices_[i].handle);
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

void CUDA_CB CudaEngine::on_copy_done(void* pending) {
  auto* p = static_cast<PendingCopy*>(pending);
  p->engine->finish(p->completion);
  delete p;
}

void CudaEngine::finish(const CopyCompletion& completion) {
  {
    std::lock_guard lock(done_mutex_);
    done_.push_back(completion);
  }
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t r = ::write(event_fd_.get(), &one, sizeof(one));
}

void CudaEngine::submit(std::span<const CopyRequest> copies) {
  for (const CopyRequest& copy : copies) {
    const int device = copy.dst_device != kHostMemory   ? copy.dst_device
                       : copy.src_device != kHostMemory ? copy.src_device
                                                        : 0;
    const TransferPath path = copy.src_device == copy.dst_device && copy.src_device != kHostMemory
                                  ? TransferPath::kComputeUnits
                                  : TransferPath::kCopyEngine;
    Device& d = devices_[device];
    CUstream stream = d.streams[d.next_stream++ % d.streams.size()];
    use_device(device);
    auto* pending = new PendingCopy{this, {copy.cookie, ErrorCode::kOk, path, copy.bytes}};
    CUresult r = cu_.cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(copy.dst),
                                   reinterpret_cast<CUdeviceptr>(copy.src), copy.bytes, stream);
    if (r == CUDA_SUCCESS) r = cu_.cuLaunchHostFunc(stream, &CudaEngine::on_copy_done, pending);
    if (r != CUDA_SUCCESS) {
      spdlog::error("cuda engine: copy of {} bytes on device {} failed: {}", copy.bytes, device,
                    cu_.describe(r));
      pending->completion.code = ErrorCode::kEngineError;
      finish(pending->completion);
      delete pending;
    }
  }
}

std::size_t CudaEngine::poll(std::vector<CopyCompletion>& out) {
  uint64_t counter;
  if (::read(event_fd_.get(), &counter, sizeof(counter)) <= 0) return 0;
  std::lock_guard lock(done_mutex_);
  out.insert(out.end(), done_.begin(), done_.end());
  const std::size_t n = done_.size();
  done_.clear();
  return n;
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
  if (exported.ipc_handle.size() != sizeof(CUipcMemHandle))
    throw Error(ErrorCode::kInvalidArgument,
                "CUDA IPC handle of " + std::to_string(exported.ipc_handle.size()) +
                    " bytes (expected " + std::to_string(sizeof(CUipcMemHandle)) + ")");
  CUdevice handle;
  if (cu_.cuDeviceGetByPCIBusId(&handle, exported.bus_id.c_str()) != CUDA_SUCCESS)
    throw Error(ErrorCode::kNotFound,
                "no GPU with PCI bus id '" + exported.bus_id + "' is visible to irisd");
  int device = -1;
  for (std::size_t i = 0; i < devices_.size(); ++i)
    if (devices_[i].handle == handle) device = static_cast<int>(i);
  if (device < 0)
    throw Error(ErrorCode::kNotFound, "GPU " + exported.bus_id + " is not managed by irisd");
  use_device(device);

  struct OpenedIpc {
    CUdeviceptr base;
    size_t bytes;
  };
  std::shared_ptr<OpenedIpc> opened =
      std::static_pointer_cast<OpenedIpc>(imports_[exported.ipc_handle].lock());
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
    opened = std::shared_ptr<OpenedIpc>(new OpenedIpc{base, size}, [this, device](OpenedIpc* o) {
      use_device(device);
      cu_.cuIpcCloseMemHandle(o->base);
      delete o;
    });
    imports_[exported.ipc_handle] = opened;
  }
  if (exported.offset > opened->bytes || exported.bytes > opened->bytes - exported.offset)
    throw Error(ErrorCode::kOutOfRange, "range [" + std::to_string(exported.offset) + ", +" +
                                            std::to_string(exported.bytes) +
                                            ") lies outside the GPU allocation of " +
                                            std::to_string(opened->bytes) + " bytes");
  // Forget imports that have been closed since.
  for (auto it = imports_.begin(); it != imports_.end();)
    it = it->second.expired() ? imports_.erase(it) : std::next(it);
  return ImportedMemory{reinterpret_cast<std::byte*>(opened->base) + exported.offset,
                        exported.bytes, device, opened};
}

}  // namespace iris::daemon
