// An operation on a GPU stream: irisd's collectives ordered on the stream (copies start when the
// stream reaches them, the stream goes on once they landed), the local steps enqueued between
// them (a copy, a reduction kernel), the host never waiting. An operation on the legacy default
// stream (a null cudaStream_t with device memory) of ranks on GPUs of their own runs on a stream
// of the communicator's that waits for the legacy stream and that the legacy stream then waits
// for, since irisd orders no work on the legacy stream itself.
//
// Ranks that share a GPU (several processes on one device) wait on the host unless told
// otherwise (IRISD_NCCL_SHARED_GPU=stream): their contexts time-slice the GPU, so irisd's copies
// within it (SM work in irisd's context) and the ranks' stream waits cost a context switch each.
// On an H100 a 4 KiB all-gather of 2 such ranks took ~450 us on streams, waiting on the host
// 36-68 us through the API and 63-111 through PyTorch (docs/PERFORMANCE.md). The call blocks its
// thread until the data moved, as irisd's torch backend does for such ranks. The stream (the
// legacy one too) is synchronized before irisd is called (and again after a local kernel whose
// output a later phase sends), irisd's calls are waited for on the host, and the reduction
// kernels still go on the stream. A stream capturing a CUDA graph is always ordered on the stream.
//
// Scratch memory is the communicator's, one area per stream: operations on one stream run in
// order, so they may share it, and it never shrinks or moves, so CUDA graphs that captured an
// operation keep a valid address for as long as the communicator lives.
#include <bit>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "client/nccl/gpu_context.hpp"
#include "client/nccl/gpu_runtime_loader.hpp"
#include "client/nccl/nccl_errors.hpp"
#include "client/nccl/operation_runner.hpp"
#include "client/nccl/reduce_launch.hpp"
#include "iris/iris.h"

#ifdef IRIS_HAVE_CUDA
#include "iris/shared/cuda_library.hpp"
#endif

#ifdef IRIS_NCCL_HAVE_KERNELS
extern "C" const unsigned char iris_nccl_reduce_fatbin[];
#endif

namespace iris::nccl {

#ifdef IRIS_HAVE_CUDA

namespace {

using CudaDriver = GpuRuntimeLoader<cuda::Driver, &cuda::load_driver>;
const cuda::Driver* loaded_driver() { return CudaDriver::loaded(); }
const cuda::Driver& driver() { return CudaDriver::required(); }

void check(CUresult result, const char* what) { CudaDriver::check(result, what); }

// Makes the communicator's device's primary context current when the thread has none.
void use_device(int device) {
  const cuda::Driver& cu = driver();
  CUcontext current = nullptr;
  if (cu.cuCtxGetCurrent(&current) == CUDA_SUCCESS && current != nullptr) return;
  CUdevice dev = 0;
  CUcontext primary = nullptr;
  check(cu.cuDeviceGet(&dev, device), "cuDeviceGet");
  check(cu.cuDevicePrimaryCtxRetain(&primary, dev), "cuDevicePrimaryCtxRetain");
  check(cu.cuCtxSetCurrent(primary), "cuCtxSetCurrent");
}

// Allocating and loading modules are refused while the thread's stream captures a graph in the
// global mode PyTorch uses; the first operation on a stream may come during a capture, so those
// calls run in the relaxed mode (what they do is not part of the graph).
class RelaxedCapture {
 public:
  RelaxedCapture() { driver().cuThreadExchangeStreamCaptureMode(&mode_); }
  ~RelaxedCapture() { driver().cuThreadExchangeStreamCaptureMode(&mode_); }

 private:
  CUstreamCaptureMode mode_ = CU_STREAM_CAPTURE_MODE_RELAXED;
};

// The reduction kernels, loaded once per context (by element type).
CUfunction reduce_kernel(ElementType type) {
#ifdef IRIS_NCCL_HAVE_KERNELS
  static std::mutex mutex;
  static std::map<CUcontext, std::vector<CUfunction>> loaded;
  const cuda::Driver& cu = driver();
  CUcontext context = nullptr;
  check(cu.cuCtxGetCurrent(&context), "cuCtxGetCurrent");
  std::lock_guard lock(mutex);
  auto& kernels = loaded[context];
  if (kernels.empty()) {
    RelaxedCapture relaxed;
    CUmodule module = nullptr;
    check(cu.cuModuleLoadData(&module, iris_nccl_reduce_fatbin),
          "loading the reduction kernels (cuModuleLoadData)");
    for (int t = 0; t < kElementTypeCount; ++t) {
      const std::string name =
          std::string("iris_nccl_reduce_") + element_name(static_cast<ElementType>(t));
      CUfunction f = nullptr;
      check(cu.cuModuleGetFunction(&f, module, name.c_str()), "cuModuleGetFunction");
      kernels.push_back(f);
    }
  }
  return kernels[static_cast<int>(type)];
#else
  throw NcclError(ncclInvalidUsage,
                  "this build of irisd's NCCL library has no GPU reduction kernels (it was "
                  "built without nvcc): reductions on device memory need a build with the CUDA "
                  "toolkit");
#endif
}

}  // namespace

struct GpuScratch {
  std::mutex mutex;  // the bridge's
  int device = 0;
  StreamScratch areas;
  CUstream bridge = nullptr;  // for the legacy stream
  CUevent legacy_reached = nullptr, bridge_done = nullptr;
};

namespace {

bool capturing(CUstream stream) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  check(driver().cuStreamIsCapturing(stream, &status), "cuStreamIsCapturing");
  return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

class StreamOp final : public RunningOp {
 public:
  explicit StreamOp(QueuedOp& op) : op_(op), cu_(driver()) {
    use_device(op.comm->device);
    GpuScratch& scratch = scratch_of<GpuScratch>(*op.comm);
    stream_ = reinterpret_cast<CUstream>(op.stream);
    if (op.comm->shared_gpu_waits_on_host && op.comm->shares_a_gpu() &&
        (stream_ == nullptr || !capturing(stream_))) {
      // The legacy stream too: PyTorch's blocking collectives come on the caller's current
      // stream, which is the legacy one unless the script chose another.
      host_waits_ = true;
      gpu_dirty_ = true;  // what the stream holds before the call produces the send data
    } else if (stream_ == nullptr) {
      bridge_from_legacy(scratch);
    }
    bases_.send = const_cast<char*>(static_cast<const char*>(op.call.send));
    bases_.recv = static_cast<char*>(op.call.recv);
    bases_.scratch = scratch.areas.reserve(
        stream_, std::max<uint64_t>(op.plan.scratch_bytes, 1), [&](std::size_t size) {
          CUdeviceptr ptr = 0;
          RelaxedCapture relaxed;
          check(cu_.cuMemAlloc(&ptr, size), "cuMemAlloc of scratch memory");
          return reinterpret_cast<void*>(ptr);
        });
    if (reduces(op.call.kind) && op.plan.recv_bytes > 0 && !is_device_memory(op.call.recv))
      throw NcclError(ncclInvalidUsage,
                      std::string(op_name(op.call.kind)) +
                          " on a stream reduces on the GPU: its receive buffer must be device "
                          "memory (pass host memory with a null stream)");
  }

  void local(const LocalStep& s) override {
    gpu_dirty_ = true;
    if (s.kind == LocalStep::Kind::kCopy) {
      check(cu_.cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(bases_.at(s.to)),
                              reinterpret_cast<CUdeviceptr>(bases_.at(s.from)), s.bytes, stream_),
            "cuMemcpyAsync");
      return;
    }
    ReduceLaunch launch(s, op_.call.reduction, bases_);
    check(cu_.cuLaunchKernel(reduce_kernel(op_.call.type), launch.grid(), 1, 1,
                             ReduceLaunch::kThreads, 1, 1, 0, stream_, launch.args(), nullptr),
          "launching the reduction kernel");
  }

  void submit(const Transfer& t) override {
    if (host_waits_) {
      if (gpu_dirty_) check(cu_.cuStreamSynchronize(stream_), "cuStreamSynchronize");
      gpu_dirty_ = false;
      waits_.submit(t, bases_);
      return;
    }
    Request request =
        submit_transfer(op_.comm->comm, t, bases_, Stream(reinterpret_cast<CUstream_st*>(stream_)));
    // A collective captured into a CUDA graph has no request: the graph waits for it, and its
    // replays' failures come from Client::check_graphs() (ncclComm::poll).
    if (request.valid()) op_.comm->watch(std::move(request));
  }

  void settle() override { waits_.settle(); }

  void finish() override {
    if (!bridged_) return;
    GpuScratch& scratch = *op_.comm->gpu;
    check(cu_.cuEventRecord(scratch.bridge_done, stream_), "cuEventRecord");
    check(cu_.cuStreamWaitEvent(nullptr, scratch.bridge_done, 0), "cuStreamWaitEvent");
  }

 private:
  void bridge_from_legacy(GpuScratch& scratch) {
    {
      std::lock_guard lock(scratch.mutex);
      if (scratch.bridge == nullptr) {
        check(cu_.cuStreamCreate(&scratch.bridge, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
        check(cu_.cuEventCreate(&scratch.legacy_reached, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
        check(cu_.cuEventCreate(&scratch.bridge_done, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
      }
    }
    check(cu_.cuEventRecord(scratch.legacy_reached, nullptr), "cuEventRecord");
    check(cu_.cuStreamWaitEvent(scratch.bridge, scratch.legacy_reached, 0), "cuStreamWaitEvent");
    stream_ = scratch.bridge;
    bridged_ = true;
  }

  QueuedOp& op_;
  const cuda::Driver& cu_;
  CUstream stream_ = nullptr;
  bool bridged_ = false;
  bool host_waits_ = false;
  bool gpu_dirty_ = false;      // work on the stream that irisd's next copies must not pass
  HostWaits waits_{*op_.comm};  // host waits: this round's
  AreaBases bases_;
};

}  // namespace

int current_device() {
  const cuda::Driver* cu = loaded_driver();
  CUcontext context = nullptr;
  CUdevice device = 0;
  if (cu == nullptr || cu->cuCtxGetCurrent(&context) != CUDA_SUCCESS || context == nullptr ||
      cu->cuCtxGetDevice(&device) != CUDA_SUCCESS)
    return 0;
  return device;
}

void* current_context() {
  const cuda::Driver* cu = loaded_driver();
  CUcontext context = nullptr;
  if (cu == nullptr || cu->cuCtxGetCurrent(&context) != CUDA_SUCCESS) return nullptr;
  return context;
}

void make_current(void* context) {
  const cuda::Driver* cu = loaded_driver();
  if (cu != nullptr && context != nullptr) cu->cuCtxSetCurrent(static_cast<CUcontext>(context));
}

bool is_device_memory(const void* ptr) {
  const cuda::Driver* cu = loaded_driver();
  if (cu == nullptr || ptr == nullptr) return false;
  CUmemorytype type{};
  return cu->cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                   reinterpret_cast<CUdeviceptr>(ptr)) == CUDA_SUCCESS &&
         type == CU_MEMORYTYPE_DEVICE;
}

void release_gpu_scratch(ncclComm& comm) {
  std::shared_ptr<GpuScratch> gpu;
  {
    std::lock_guard lock(comm.mutex);
    gpu.swap(comm.gpu);
  }
  const cuda::Driver* cu = loaded_driver();
  if (!gpu || cu == nullptr) return;
  use_device(gpu->device);
  cu->cuCtxSynchronize();  // the streams that used the scratch are done with it
  gpu->areas.for_each([&](void*, void* area, std::size_t bytes) {
    iris_gpu_memory_freed(area, bytes);
    cu->cuMemFree(reinterpret_cast<CUdeviceptr>(area));
  });
  if (gpu->bridge != nullptr) {
    cu->cuEventDestroy(gpu->legacy_reached);
    cu->cuEventDestroy(gpu->bridge_done);
    cu->cuStreamDestroy(gpu->bridge);
  }
}

void* allocate_device(std::size_t bytes) {
  use_device(current_device());
  CUdeviceptr ptr = 0;
  check(driver().cuMemAlloc(&ptr, bytes), "cuMemAlloc");
  return reinterpret_cast<void*>(ptr);
}

void free_device(void* ptr) {
  const cuda::Driver& cu = driver();
  CUdeviceptr base = 0;
  std::size_t bytes = 0;
  check(cu.cuMemGetAddressRange(&base, &bytes, reinterpret_cast<CUdeviceptr>(ptr)),
        "ncclMemFree of memory that is no ncclMemAlloc allocation: cuMemGetAddressRange");
  iris_gpu_memory_freed(ptr, bytes);
  check(cu.cuMemFree(reinterpret_cast<CUdeviceptr>(ptr)), "cuMemFree");
}

std::string device_bus_id(int device) {
  const cuda::Driver* cu = loaded_driver();
  CUdevice dev = 0;
  char id[32] = {};
  if (cu == nullptr || cu->cuDeviceGet(&dev, device) != CUDA_SUCCESS ||
      cu->cuDeviceGetPCIBusId(id, sizeof id - 1, dev) != CUDA_SUCCESS)
    return "";
  return id;
}

void read_device_scalar(const void* at, std::size_t bytes, void* out) {
  if (!is_device_memory(at)) {
    std::memcpy(out, at, bytes);
    return;
  }
  check(driver().cuMemcpyDtoH(out, reinterpret_cast<CUdeviceptr>(at), bytes), "cuMemcpyDtoH");
}

bool runs_on_stream(const QueuedOp& op) {
  if (op.stream != nullptr) return true;
  if (loaded_driver() == nullptr) return false;
  return is_device_memory(op.call.send) || is_device_memory(op.call.recv);
}

std::unique_ptr<RunningOp> start_on_stream(QueuedOp& op) { return std::make_unique<StreamOp>(op); }

#else  // no cuda.h: host memory only

struct GpuScratch {};

int current_device() { return 0; }
void* current_context() { return nullptr; }
void make_current(void*) {}
std::string device_bus_id(int) { return ""; }
bool is_device_memory(const void*) { return false; }
void release_gpu_scratch(ncclComm&) {}
void* allocate_device(std::size_t) {
  throw NcclError(ncclInvalidUsage, "this build of irisd's NCCL library has no CUDA support");
}
void free_device(void*) {
  throw NcclError(ncclInvalidArgument, "ncclMemFree of memory ncclMemAlloc did not allocate");
}
void read_device_scalar(const void* at, std::size_t bytes, void* out) {
  std::memcpy(out, at, bytes);
}
bool runs_on_stream(const QueuedOp& op) { return op.stream != nullptr; }
std::unique_ptr<RunningOp> start_on_stream(QueuedOp& op) {
  throw NcclError(ncclInvalidUsage,
                  "this build of irisd's NCCL library has no CUDA support: pass a null stream "
                  "and host memory");
}

#endif

}  // namespace iris::nccl
