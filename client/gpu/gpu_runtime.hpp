// The GPU runtime calls libiris makes, one implementation per vendor (the CUDA driver, HIP),
// picked by the kind of memory or stream the caller passed: exporting device memory for irisd
// (export_gpu_buffer holds the algorithm once) and ordering requests on a caller's stream
// (StreamFlagsMapping). Both runtimes are loaded at run time, so libiris loads on machines with
// neither.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "iris/shared/unix_socket.hpp"
#ifdef IRIS_HAVE_HIP
#include "iris/shared/hip_library.hpp"
#endif
#include "iris/v1/attach.pb.h"

namespace iris {

enum class GpuVendor : uint8_t { kCuda, kHip };

// One physical allocation of GPU memory: a cudaMalloc allocation, or one VMM allocation mapped
// at `base`; `block_id` is the driver's process-wide unique id of the allocation, so memory
// freed and allocated again at the same address has a new one.
struct GpuChunk {
  uintptr_t base;
  std::size_t bytes;
  uint64_t block_id;
};

// A caller's stream: a CUstream / cudaStream_t, or a hipStream_t.
struct GpuStream {
  void* handle;
  GpuVendor vendor;
};

class GpuRuntime {
 public:
  virtual ~GpuRuntime() = default;
  virtual GpuVendor vendor() const = 0;
  // The runtime's version as it reports it (hipRuntimeGetVersion, cuDriverGetVersion).
  virtual int version() const = 0;

  // Device memory. Each throws iris::Error naming what failed.
  // PCI bus id of the GPU holding `ptr`; kInvalidArgument when it is no device memory.
  virtual std::string bus_id_of(const void* ptr) = 0;
  // Makes the context (HIP: the device) that owns `ptr` current on this thread when none is:
  // libiris's own threads call the runtime too (a resumed session registers its GPU memory again
  // from the daemon watch's thread).
  virtual void use_context_of(const void* ptr) = 0;
  // The allocation (or, for VMM memory, the physical allocation) holding `ptr`.
  virtual std::pair<uintptr_t, std::size_t> allocation_of(uintptr_t ptr) = 0;
  // The legacy IPC handle of an allocation; nullopt when it has none (VMM memory).
  virtual std::optional<std::string> ipc_handle(uintptr_t allocation) = 0;
  // A POSIX file descriptor for a VMM allocation.
  virtual int export_fd(uintptr_t allocation) = 0;
  // The physical allocation mapped at `ptr`, in one driver query; nullopt when `ptr` is no GPU
  // memory of this process, or the runtime cannot name allocations (then nothing is registered
  // on first use).
  virtual std::optional<GpuChunk> chunk_of(uintptr_t ptr) = 0;

  // Stream ordering.
  // Pins host memory and maps it for the GPU; returns the device address of `base`.
  virtual uint64_t map_host(void* base, std::size_t bytes) = 0;
  virtual void unmap_host(void* base) = 0;
  // Zeroed GPU memory for done flags, and its release.
  virtual uint64_t allocate_flags(std::size_t bytes) = 0;
  virtual void free_flags(uint64_t address) = 0;
  // Stores a flag from the host (used when irisd can no longer write it).
  virtual void store_flag(uint64_t address, uint32_t value) = 0;
  // Reads a flag from the host, past any stream that waits on it (a resume asks whether irisd
  // wrote it before it died). Throws iris::Error.
  virtual uint32_t load_flag(uint64_t address) = 0;
  // A device-to-device copy enqueued on the caller's stream.
  virtual void copy_async(void* stream, void* dst, const void* src, std::size_t bytes) = 0;
  // Stream memory operations, enqueued on the caller's stream.
  virtual void write_value(void* stream, uint64_t address, uint32_t value) = 0;
  virtual void wait_value_geq(void* stream, uint64_t address, uint32_t value) = 0;

  // CUDA graphs. Whether `stream` is capturing into a graph now.
  virtual bool capturing(void* stream) = 0;
  // Throws iris::Error, saying why, where collectives cannot be captured (before anything is).
  virtual void check_capture_supported() = 0;
  // Calls `destroyed` once the graph `stream` captures into is destroyed (on one of the
  // runtime's threads, where no GPU call may be made). Throws iris::Error where the runtime
  // cannot capture collectives.
  virtual void on_graph_destroyed(void* stream, std::function<void()> destroyed) = 0;
  // Runs `f` with this thread's capture mode relaxed: set-up that capture forbids (allocating,
  // pinning) may then run while a stream captures.
  virtual void outside_capture_rules(const std::function<void()>& f) = 0;
};

// Throws iris::Error kUnavailable when libiris was built without the vendor's headers or its
// runtime cannot be loaded here.
std::unique_ptr<GpuRuntime> make_gpu_runtime(GpuVendor vendor);
#ifdef IRIS_HAVE_HIP
// The HIP one over a given table (tests pass a stand-in ROCm runtime).
std::unique_ptr<GpuRuntime> make_hip_runtime(const hip::Runtime& table);
#endif

// A range of this process's GPU memory, described for irisd to import: memory with a legacy IPC
// handle (cudaMalloc, hipMalloc) as that handle plus the range (sent as RegisterIpcBuffer), VMM
// memory (cuMemCreate / hipMemCreate + map, PyTorch's expandable segments) as one POSIX file
// descriptor per physical allocation the range touches (sent over the attach socket).
struct ExportedGpuBuffer {
  std::optional<v1::CudaIpcBuffer> ipc;
  v1::RegisterVmmBuffer vmm;
  std::vector<net::Fd> fds;
};
ExportedGpuBuffer export_gpu_buffer(GpuRuntime& runtime, void* device_ptr, std::size_t bytes);

// The registration of an IPC-exported range, marked with the runtime that exported it.
v1::RegisterIpcBuffer register_request(GpuVendor vendor, const v1::CudaIpcBuffer& ipc);

}  // namespace iris
