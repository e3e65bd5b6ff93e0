// The GPU runtime calls that order requests on a caller's stream, one implementation per vendor
// (the CUDA driver, HIP), picked by the type of stream the caller passed. Both runtimes are loaded
// at run time, so libiris loads on machines with neither.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "iris/v1/control.pb.h"

namespace iris {

enum class GpuVendor : uint8_t { kCuda, kHip };

// A caller's stream: a CUstream / cudaStream_t, or a hipStream_t.
struct GpuStream {
  void* handle;
  GpuVendor vendor;
};

class GpuStreamApi {
 public:
  virtual ~GpuStreamApi() = default;
  // Pins host memory and maps it for the GPU; returns the device address of `base`.
  virtual uint64_t map_host(void* base, std::size_t bytes) = 0;
  virtual void unmap_host(void* base) = 0;
  // Zeroed GPU memory for done flags, and its release.
  virtual uint64_t allocate_flags(std::size_t bytes) = 0;
  virtual void free_flags(uint64_t address) = 0;
  // Stores a flag from the host (used when irisd can no longer write it).
  virtual void store_flag(uint64_t address, uint32_t value) = 0;
  // The RegisterBuffer request that hands the flag memory to irisd.
  virtual v1::RegisterBufferRequest export_flags(uint64_t address, std::size_t bytes) = 0;
  // Stream memory operations, enqueued on the caller's stream.
  virtual void write_value(void* stream, uint64_t address, uint32_t value) = 0;
  virtual void wait_value_geq(void* stream, uint64_t address, uint32_t value) = 0;
};

// Throws iris::Error kUnavailable when libiris was built without the vendor's headers or its
// runtime cannot be loaded here.
std::unique_ptr<GpuStreamApi> make_cuda_stream_api();
std::unique_ptr<GpuStreamApi> make_hip_stream_api();

}  // namespace iris
