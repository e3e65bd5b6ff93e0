// Exports a range of this process's GPU memory for irisd (CUDA IPC handle of the allocation, the
// range inside it, the device's PCI bus id). Throws iris::Error.
#pragma once

#include <cstddef>

#include "iris/v1/control.pb.h"

namespace iris {

v1::CudaIpcBuffer export_cuda_buffer(void* device_ptr, std::size_t bytes);

}  // namespace iris
