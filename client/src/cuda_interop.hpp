// libiris's use of the CUDA driver (loaded at run time): exporting GPU memory for irisd, and
// ordering requests on a caller's stream through the session segment's flags.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <vector>

#include "iris/shared/segment_layout.hpp"
#include "iris/shared/unix_socket.hpp"
#include "iris/v1/control.pb.h"

struct CUstream_st;

namespace iris {

// A range of this process's GPU memory, described for irisd to import: cudaMalloc memory as a
// legacy IPC handle (sent with RegisterBuffer), VMM memory (cuMemCreate + cuMemMap, PyTorch's
// expandable segments) as one POSIX file descriptor per physical allocation the range touches
// (sent over the attach socket). Throws iris::Error.
struct ExportedCudaBuffer {
  std::optional<v1::CudaIpcBuffer> ipc;
  v1::RegisterVmmBuffer vmm;
  std::vector<net::Fd> fds;
};
ExportedCudaBuffer export_cuda_buffer(void* device_ptr, std::size_t bytes);

// Stream ordering for one session. Ready flags live in the session segment (host memory, pinned
// and mapped for the GPU on first use): the stream writes them, irisd polls them. Done flags live
// in GPU memory allocated here on first use and registered with irisd, which writes them with a
// stream memory operation, so the waiting stream polls its own GPU's memory.
class StreamFlagsMapping {
 public:
  using RegisterDoneFlags = std::function<void(const v1::CudaIpcBuffer&)>;
  StreamFlagsMapping(void* segment_base, std::size_t segment_bytes, shm::StreamFlags* flags,
                     uint32_t depth, RegisterDoneFlags register_done_flags);
  ~StreamFlagsMapping();
  // Stores `generation` into a slot's done flag from the host (streams go on when irisd cannot
  // write it any more). Best effort; no-op before first use.
  void release(uint32_t slot, uint32_t generation);
  // Enqueues on `stream`: flags[slot].ready = generation; registers the done flags with irisd
  // first if this is the session's first stream-ordered request. Throws iris::Error.
  void enqueue_ready(CUstream_st* stream, uint32_t slot, uint32_t generation);
  // Enqueues on `stream`: wait until the slot's done flag >= generation. Throws iris::Error.
  void enqueue_wait_done(CUstream_st* stream, uint32_t slot, uint32_t generation);

 private:
  uint64_t device_address(const void* host_address);
  uint64_t done_flag_address(uint32_t slot);

  void* base_;
  std::size_t bytes_;
  shm::StreamFlags* flags_;
  uint32_t depth_;
  RegisterDoneFlags register_done_flags_;
  std::once_flag registered_;
  uint64_t device_base_ = 0;
  std::once_flag done_flags_allocated_;
  uint64_t done_flags_ = 0;  // GPU memory, depth_ x uint32
};

}  // namespace iris
