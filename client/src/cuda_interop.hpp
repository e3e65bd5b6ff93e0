// libiris's use of the CUDA driver (loaded at run time): exporting GPU memory for irisd. (Its
// stream operations are the CUDA GpuStreamApi, make_cuda_stream_api.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "iris/shared/unix_socket.hpp"
#include "iris/v1/control.pb.h"

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

}  // namespace iris
