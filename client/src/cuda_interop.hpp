// libiris's use of the CUDA driver (loaded at run time): exporting GPU memory for irisd, and
// ordering requests on a caller's stream through the session segment's flags.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>

#include "iris/shared/segment_layout.hpp"
#include "iris/v1/control.pb.h"

struct CUstream_st;

namespace iris {

// A range of this process's GPU memory, described for irisd to import. Throws iris::Error.
v1::CudaIpcBuffer export_cuda_buffer(void* device_ptr, std::size_t bytes);

// The session segment's stream flags as the caller's GPUs see them: the segment is pinned and
// mapped for the device on first use.
class StreamFlagsMapping {
 public:
  StreamFlagsMapping(void* segment_base, std::size_t segment_bytes, shm::StreamFlags* flags);
  ~StreamFlagsMapping();
  // Enqueues on `stream`: flags[slot].ready = generation. Throws iris::Error.
  void enqueue_ready(CUstream_st* stream, uint32_t slot, uint32_t generation);
  // Enqueues on `stream`: wait until flags[slot].done >= generation. Throws iris::Error.
  void enqueue_wait_done(CUstream_st* stream, uint32_t slot, uint32_t generation);

 private:
  uint64_t device_address(const void* host_address);

  void* base_;
  std::size_t bytes_;
  shm::StreamFlags* flags_;
  std::once_flag registered_;
  uint64_t device_base_ = 0;
};

}  // namespace iris
