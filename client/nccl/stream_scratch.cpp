// A communicator's GPU scratch areas per stream (StreamScratch, gpu_context.hpp), shared by the
// CUDA and HIP builds: each allocates with its own runtime through the callback.
#include <algorithm>
#include <bit>

#include "client/nccl/gpu_context.hpp"

namespace iris::nccl {

char* StreamScratch::reserve(void* stream, std::size_t bytes,
                             const std::function<void*(std::size_t)>& allocate) {
  std::lock_guard lock(mutex_);
  auto& areas = by_stream_[stream];
  if (areas.empty() || areas.back().second < bytes) {
    const std::size_t size = std::bit_ceil(std::max<std::size_t>(bytes, 64 << 10));
    areas.emplace_back(allocate(size), size);
  }
  return static_cast<char*>(areas.back().first);
}

void StreamScratch::for_each(
    const std::function<void(void* stream, void* area, std::size_t bytes)>& f) const {
  std::lock_guard lock(mutex_);
  for (const auto& [stream, areas] : by_stream_)
    for (const auto& [area, bytes] : areas) f(stream, area, bytes);
}

}  // namespace iris::nccl
