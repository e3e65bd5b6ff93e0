// The GPU side of the RCCL build of irisd's library (librccl.so.1): HIP streams and AMD device
// memory, through the HIP runtime loaded at run time (iris/shared/hip_library.hpp), so that the
// library loads on machines without ROCm. It stands in for stream_operation.cpp, the CUDA one.
//
// An operation with a HIP stream is ordered on it, as on CUDA: each irisd call goes through
// libiris's HIP stream path (the stream writes a ready flag that irisd waits for, and waits for
// the done flag irisd writes; docs/MI300.md), local copies are enqueued on the stream, and the
// call returns at once; a failure reaches ncclCommGetAsyncError. The host waits instead on the
// null stream (libiris orders on no legacy stream), and for ranks that share a GPU (unless
// IRISD_NCCL_SHARED_GPU=stream): the stream is synchronized before irisd is called (and again after
// a local copy whose output a later phase sends) and irisd's calls are waited for on the host.
// The reductions run the kernels hiprtc compiles on the node (hip_reduce_kernels.hpp) on the
// stream after irisd's copies, as on CUDA; with IRISD_NCCL_FALLBACK naming ROCm's librccl.so.1
// they go to it instead (IRISD_NCCL_FALLBACK_OPS defaults to them). A stream capturing a graph is
// refused: irisd's HIP graph capture goes through libiris's own API.
#include <bit>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "client/nccl/gpu_context.hpp"
#include "client/nccl/gpu_runtime_loader.hpp"
#include "client/nccl/hip_reduce_kernels.hpp"
#include "client/nccl/nccl_errors.hpp"
#include "client/nccl/operation_runner.hpp"
#include "client/nccl/reduce_launch.hpp"
#include "iris/iris.h"
#include "iris/shared/hip_library.hpp"

namespace iris::nccl {

namespace {

const hip::Runtime* loaded_runtime() { return HipRuntime::loaded(); }
const hip::Runtime& runtime() { return HipRuntime::required(); }

void check(hipError_t result, const char* what) { HipRuntime::check(result, what); }

hipStream_t hip_stream(cudaStream_t stream) { return reinterpret_cast<hipStream_t>(stream); }

}  // namespace

struct GpuScratch {
  int device = 0;
  StreamScratch areas;
};

namespace {

class HipStreamOp final : public RunningOp {
 public:
  explicit HipStreamOp(QueuedOp& op) : op_(op), hip_(runtime()), stream_(hip_stream(op.stream)) {
    check(hip_.hipSetDevice(op.comm->device), "hipSetDevice");
    if (hip_.hipStreamIsCapturing != nullptr) {
      hipStreamCaptureStatus status = hipStreamCaptureStatusNone;
      check(hip_.hipStreamIsCapturing(stream_, &status), "hipStreamIsCapturing");
      if (status != hipStreamCaptureStatusNone)
        throw NcclError(ncclInvalidUsage,
                        std::string(op_name(op.call.kind)) +
                            " on a capturing HIP stream: the RCCL build of irisd's library waits "
                            "on the host and cannot be captured into a graph");
    }
    if (reduces(op.call.kind) && op.plan.recv_bytes > 0 && !is_device_memory(op.call.recv))
      throw NcclError(ncclInvalidUsage,
                      std::string(op_name(op.call.kind)) +
                          " on a stream reduces on the GPU: its receive buffer must be device "
                          "memory (pass host memory with a null stream)");
    host_waits_ =
        stream_ == nullptr || (op.comm->shared_gpu_waits_on_host && op.comm->shares_a_gpu());
    bases_.send = const_cast<char*>(static_cast<const char*>(op.call.send));
    bases_.recv = static_cast<char*>(op.call.recv);
    bases_.scratch = scratch_of<GpuScratch>(*op.comm).areas.reserve(
        stream_, std::max<uint64_t>(op.plan.scratch_bytes, 1), [&](std::size_t size) {
          void* ptr = nullptr;
          check(hip_.hipMalloc(&ptr, size), "hipMalloc of scratch memory");
          return ptr;
        });
  }

  void local(const LocalStep& s) override {
    gpu_dirty_ = true;
    if (s.kind == LocalStep::Kind::kCopy) {
      check(hip_.hipMemcpyAsync(bases_.at(s.to), bases_.at(s.from), s.bytes,
                                hipMemcpyDeviceToDevice, stream_),
            "hipMemcpyAsync");
      return;
    }
    ReduceLaunch launch(s, op_.call.reduction, bases_);
    check(hip_.hipModuleLaunchKernel(hip_reduce_kernel(hip_, op_.comm->device, op_.call.type),
                                     launch.grid(), 1, 1, ReduceLaunch::kThreads, 1, 1, 0, stream_,
                                     launch.args(), nullptr),
          "launching the reduction kernel (hipModuleLaunchKernel)");
  }

  void submit(const Transfer& t) override {
    if (!host_waits_) {
      Request request = submit_transfer(op_.comm->comm, t, bases_, Stream(stream_));
      op_.comm->watch(std::move(request));
      return;
    }
    if (gpu_dirty_) check(hip_.hipStreamSynchronize(stream_), "hipStreamSynchronize");
    gpu_dirty_ = false;
    waits_.submit(t, bases_);
  }

  void settle() override { waits_.settle(); }

  void finish() override {
    if (host_waits_ && gpu_dirty_)
      check(hip_.hipStreamSynchronize(stream_), "hipStreamSynchronize");
  }

 private:
  QueuedOp& op_;
  const hip::Runtime& hip_;
  hipStream_t stream_;
  bool host_waits_ = false;
  bool gpu_dirty_ = true;  // host waits: what the stream holds before the call made send data
  HostWaits waits_{*op_.comm};
  AreaBases bases_;
};

}  // namespace

int current_device() {
  const hip::Runtime* r = loaded_runtime();
  int device = 0;
  if (r == nullptr || r->hipGetDevice(&device) != hipSuccess) return 0;
  return device;
}

// HIP has no contexts: the device is the thread's state, carried as device + 1.
void* current_context() {
  return reinterpret_cast<void*>(static_cast<uintptr_t>(current_device()) + 1);
}

void make_current(void* context) {
  const hip::Runtime* r = loaded_runtime();
  if (r != nullptr && context != nullptr)  // the caller's thread had it: it exists
    static_cast<void>(r->hipSetDevice(static_cast<int>(reinterpret_cast<uintptr_t>(context) - 1)));
}

std::string device_bus_id(int device) {
  const hip::Runtime* r = loaded_runtime();
  char id[64] = {};
  if (r == nullptr || r->hipDeviceGetPCIBusId(id, sizeof id - 1, device) != hipSuccess) return "";
  return id;
}

bool is_device_memory(const void* ptr) {
  const hip::Runtime* r = loaded_runtime();
  if (r == nullptr || ptr == nullptr) return false;
  int ordinal = -1;
  return r->hipPointerGetAttribute(&ordinal, HIP_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                   const_cast<void*>(ptr)) == hipSuccess &&
         ordinal >= 0;
}

void release_gpu_scratch(ncclComm& comm) {
  std::shared_ptr<GpuScratch> gpu;
  {
    std::lock_guard lock(comm.mutex);
    gpu.swap(comm.gpu);
  }
  const hip::Runtime* r = loaded_runtime();
  if (!gpu || r == nullptr) return;
  // A communicator's end: a failure here has nobody to tell, and the memory goes with the process.
  static_cast<void>(r->hipSetDevice(gpu->device));
  static_cast<void>(r->hipDeviceSynchronize());  // the streams that used the scratch are done
  gpu->areas.for_each([&](void*, void* area, std::size_t bytes) {
    iris_gpu_memory_freed(area, bytes);
    static_cast<void>(r->hipFree(area));
  });
}

void* allocate_device(std::size_t bytes) {
  void* ptr = nullptr;
  check(runtime().hipMalloc(&ptr, bytes), "hipMalloc");
  return ptr;
}

void free_device(void* ptr) {
  const hip::Runtime& r = runtime();
  hipDeviceptr_t base = nullptr;
  std::size_t bytes = 0;
  check(r.hipMemGetAddressRange(&base, &bytes, ptr),
        "ncclMemFree of memory that is no ncclMemAlloc allocation: hipMemGetAddressRange");
  iris_gpu_memory_freed(ptr, bytes);
  check(r.hipFree(ptr), "hipFree");
}

void read_device_scalar(const void* at, std::size_t bytes, void* out) {
  if (!is_device_memory(at)) {
    std::memcpy(out, at, bytes);
    return;
  }
  const hip::Runtime& r = runtime();
  check(r.hipMemcpyAsync(out, at, bytes, hipMemcpyDeviceToHost, nullptr), "hipMemcpyAsync");
  check(r.hipStreamSynchronize(nullptr), "hipStreamSynchronize");
}

bool runs_on_stream(const QueuedOp& op) {
  if (op.stream != nullptr) return true;
  if (loaded_runtime() == nullptr) return false;
  return is_device_memory(op.call.send) || is_device_memory(op.call.recv);
}

std::unique_ptr<RunningOp> start_on_stream(QueuedOp& op) {
  return std::make_unique<HipStreamOp>(op);
}

}  // namespace iris::nccl
