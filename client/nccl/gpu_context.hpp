// The GPU side of irisd's NCCL library: the CUDA driver (loaded at run time, so the library loads
// on machines without one), the device a communicator is made on, whether memory is device
// memory, and each communicator's GPU scratch memory. Builds without cuda.h answer "no GPU".
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "client/nccl/nccl_comm.hpp"

namespace iris::nccl {

// A communicator's GPU scratch memory, one area per stream: operations on one stream run in
// order, so they may share it; it only grows (a new, larger area), never moves or shrinks, so CUDA
// graphs that captured an operation keep a valid address while the communicator lives.
class StreamScratch {
 public:
  // The area of `stream` of at least `bytes`; `allocate(size)` makes a larger one when needed.
  char* reserve(void* stream, std::size_t bytes, const std::function<void*(std::size_t)>& allocate);
  // Each stream and its areas (the release; no reserve may run meanwhile).
  void for_each(const std::function<void(void* stream, void* area, std::size_t bytes)>& f) const;

 private:
  mutable std::mutex mutex_;
  std::map<void*, std::vector<std::pair<void*, std::size_t>>> by_stream_;  // last: the largest
};

// The communicator's GpuScratch (each GPU side defines it), made on first use on `device`.
template <typename Scratch>
Scratch& scratch_of(ncclComm& comm) {
  std::lock_guard lock(comm.mutex);
  if (!comm.gpu) {
    auto made = std::make_shared<Scratch>();
    made->device = comm.device;
    comm.gpu = std::move(made);
  }
  return static_cast<Scratch&>(*comm.gpu);
}

// The device of the calling thread's current CUDA context (0 without a GPU or a context).
int current_device();
// The calling thread's current CUDA context (nullptr without one), and making it current on
// another thread (a non-blocking init's), so that what runs there uses the caller's device.
void* current_context();
void make_current(void* context);
// The PCI bus id of CUDA device `device` ("" without a GPU).
std::string device_bus_id(int device);
// True for device memory of this process (false without a GPU).
bool is_device_memory(const void* ptr);
// Frees the communicator's GPU scratch memory once the GPU is done with it.
void release_gpu_scratch(ncclComm& comm);
// ncclMemAlloc's device memory (cuMemAlloc on the current device) and its release, which also
// ends irisd's registrations of it.
void* allocate_device(std::size_t bytes);
void free_device(void* ptr);
// Reads a device-resident scalar (ncclScalarDevice) of `bytes` into `out`, for a reduction the
// host runs.
void read_device_scalar(const void* at, std::size_t bytes, void* out);

}  // namespace iris::nccl
