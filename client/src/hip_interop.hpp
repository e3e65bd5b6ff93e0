// libiris's use of the HIP runtime (loaded at run time): exporting GPU memory for irisd's hsa
// engine. (Its stream operations are the HIP GpuStreamApi, make_hip_stream_api.)
#pragma once

#include <cstddef>

#include "iris/v1/control.pb.h"

namespace iris {

// Any range of a hipMalloc allocation of this process, as a HIP IPC handle of the allocation
// plus the range (sent with RegisterBuffer's hip_ipc). Throws iris::Error.
v1::CudaIpcBuffer export_hip_buffer(void* device_ptr, std::size_t bytes);

}  // namespace iris
