// iris-gpu-rank: one rank of a GPU all-gather test, a real client process of irisd with the cuda
// engine. Data is made by a kernel from (seed, rank, iteration), receive buffers are poisoned
// with its complement first, and every byte is checked afterwards (by a kernel for GPU memory).
// Exit status: 0 on success, 2 on a data mismatch, 3 on a CUDA error, 10 + iris::ErrorCode when
// libiris threw.
#include <cuda.h>
#include <cuda_runtime.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "iris/iris.hpp"
#include "tests/gpu/cuda_check.cuh"
#include "tests/gpu/gpu_pattern.cuh"
#include "tests/gpu/gpu_rank.cuh"
#include "tests/support/collective_call.hpp"

namespace iris::gpu_rank {

using iris::gpu_test::pattern_byte;

__global__ void fill_kernel(uint8_t* dst, uint64_t bytes, uint64_t seed, uint32_t rank,
                            uint64_t iteration, uint8_t invert) {
  for (uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; i < bytes;
       i += uint64_t{gridDim.x} * blockDim.x)
    dst[i] = pattern_byte(seed, rank, iteration, i) ^ invert;
}

__global__ void check_kernel(const uint8_t* src, uint64_t bytes, uint64_t seed, uint32_t rank,
                             uint64_t iteration, unsigned long long* first_bad) {
  for (uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; i < bytes;
       i += uint64_t{gridDim.x} * blockDim.x)
    if (src[i] != pattern_byte(seed, rank, iteration, i)) atomicMin(first_bad, i);
}

// `bytes` (rounded up) of GPU 0's memory as PyTorch's expandable segments make it: one reserved
// address range with `chunks` physical allocations mapped back to back, exportable as POSIX file
// descriptors.
struct VmmRange {
  CUdeviceptr base;
  uint64_t bytes;
};
std::vector<VmmRange> vmm_ranges;  // unmapped and released by vmm_free_all

uint8_t* vmm_alloc(uint64_t bytes, uint64_t chunks) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t granularity = 0;
  CU_CHECK(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  const uint64_t chunk =
      ((bytes + chunks - 1) / chunks + granularity - 1) / granularity * granularity;
  CUdeviceptr base = 0;
  CU_CHECK(cuMemAddressReserve(&base, chunk * chunks, 0, 0, 0));
  for (uint64_t i = 0; i < chunks; ++i) {
    CUmemGenericAllocationHandle handle;
    CU_CHECK(cuMemCreate(&handle, chunk, &prop, 0));
    CU_CHECK(cuMemMap(base + i * chunk, chunk, 0, handle, 0));
    CU_CHECK(cuMemRelease(handle));
  }
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CU_CHECK(cuMemSetAccess(base, chunk * chunks, &access, 1));
  vmm_ranges.push_back({base, chunk * chunks});
  return reinterpret_cast<uint8_t*>(base);
}

void vmm_free_all() {
  for (const VmmRange& r : vmm_ranges) {
    CU_CHECK(cuMemUnmap(r.base, r.bytes));
    CU_CHECK(cuMemAddressFree(r.base, r.bytes));
  }
  vmm_ranges.clear();
}

uint64_t size_for(const Options& o, uint64_t it) {
  const uint64_t r = iris::gpu_test::mix(o.seed ^ (it * 0x9e3779b97f4a7c15ull));
  if (it == 0) return 1;
  if (it == 1) return o.max_bytes;
  const double exponent = std::log2(static_cast<double>(o.max_bytes)) *
                          static_cast<double>(r >> 11) / static_cast<double>(1ull << 53);
  uint64_t bytes = static_cast<uint64_t>(std::exp2(exponent)) | (r & 1);  // odd ones too
  return std::clamp<uint64_t>(bytes, 1, o.max_bytes);
}

iris::Client connect(const Options& o) {
  iris::ClientOptions options;
  options.socket_path = o.socket;
  options.client_name = "iris-gpu-rank " + std::to_string(o.rank);
  if (o.resume_window_ms >= 0)
    options.resume_window = std::chrono::milliseconds(o.resume_window_ms);
  return iris::Client::connect(options);
}

int run(const Options& o) {
  CUDA_CHECK(cudaSetDevice(0));
  auto client = connect(o);
  auto comm = iris::Communicator::init(client, o.key, o.nranks, o.rank);
  const uint64_t recv_bytes = o.nranks * o.max_bytes + 64;
  uint8_t* send_dev = nullptr;
  uint8_t* recv_dev = nullptr;
  CUDA_CHECK(cudaFree(nullptr));  // the primary context, current for the driver API too
  if (o.vmm) {
    send_dev = vmm_alloc(o.max_bytes + 64, 2);
  } else {
    CUDA_CHECK(cudaMalloc(&send_dev, o.max_bytes + 64));
  }
  auto send = client.register_cuda_buffer(send_dev, o.max_bytes + 64);
  iris::Buffer recv_buffer;
  uint8_t* recv = nullptr;
  if (o.host_recv) {
    recv_buffer = client.allocate(recv_bytes);  // shared memory, pinned by irisd
    recv = recv_buffer.as<uint8_t>();
  } else {
    if (o.vmm) {
      recv_dev = vmm_alloc(recv_bytes, 3);
    } else {
      CUDA_CHECK(cudaMalloc(&recv_dev, recv_bytes));
    }
    recv_buffer = client.register_cuda_buffer(recv_dev, recv_bytes);
    recv = recv_dev;
  }
  unsigned long long* first_bad = nullptr;
  CUDA_CHECK(cudaMalloc(&first_bad, sizeof(*first_bad)));

  // Stream-ordered mode: producer kernel, all-gather and checking kernel are queued on one
  // stream with no host synchronisation between them; the host looks only at the end.
  cudaStream_t st = nullptr;
  if (o.stream) CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  for (uint64_t it = 0; it < o.iterations; ++it) {
    const uint64_t bytes = size_for(o, it);
    const uint64_t offset = o.time_only ? 0 : it % 7;  // odd offsets in the receive buffer
    uint8_t* r = recv + offset;
    if (!o.time_only) {
      for (uint32_t src = 0; src < o.nranks; ++src) {
        if (o.host_recv) {
          for (uint64_t i = 0; i < bytes; ++i)
            r[src * bytes + i] = pattern_byte(o.seed, src, it, i) ^ 0xff;
        } else {
          fill_kernel<<<kBlocks, kThreads, 0, st>>>(r + src * bytes, bytes, o.seed, src, it, 0xff);
        }
      }
    }
    uint8_t* s = o.inplace && !o.host_recv ? r + o.rank * bytes : send_dev;
    if (!o.time_only) fill_kernel<<<kBlocks, kThreads, 0, st>>>(s, bytes, o.seed, o.rank, it, 0);
    CUDA_CHECK(cudaGetLastError());
    iris::Request request;
    if (o.stream) {
      request = comm.all_gather(s, r, bytes, st);
    } else {
      CUDA_CHECK(cudaDeviceSynchronize());
      comm.all_gather(s, r, bytes).wait();
    }
    if (o.time_only) continue;
    // The send buffer is ours again once the all-gather is done: scribble over it first.
    if (!o.inplace) CUDA_CHECK(cudaMemsetAsync(send_dev, 0x5a, o.max_bytes + 64, st));
    for (uint32_t src = 0; src < o.nranks; ++src) {
      uint64_t bad = bytes;
      if (o.host_recv) {
        if (o.stream) CUDA_CHECK(cudaStreamSynchronize(st));
        for (uint64_t i = 0; i < bytes && bad == bytes; ++i)
          if (r[src * bytes + i] != pattern_byte(o.seed, src, it, i)) bad = i;
      } else {
        unsigned long long none = ~0ull, found = 0;
        CUDA_CHECK(cudaMemcpyAsync(first_bad, &none, sizeof(none), cudaMemcpyHostToDevice, st));
        check_kernel<<<kBlocks, kThreads, 0, st>>>(r + src * bytes, bytes, o.seed, src, it,
                                                   first_bad);
        CUDA_CHECK(cudaMemcpyAsync(&found, first_bad, sizeof(found), cudaMemcpyDeviceToHost, st));
        CUDA_CHECK(cudaStreamSynchronize(st));
        if (found != none) bad = found;
      }
      if (bad != bytes) {
        std::fprintf(
            stderr,
            "rank %u iteration %llu (%llu bytes): block of rank %u wrong at %llu (seed %llu)\n",
            o.rank, static_cast<unsigned long long>(it), static_cast<unsigned long long>(bytes),
            src, static_cast<unsigned long long>(bad), static_cast<unsigned long long>(o.seed));
        return 2;
      }
    }
    if (request.valid()) request.wait();  // throws if the collective failed
  }
  if (st != nullptr) {
    CUDA_CHECK(cudaStreamSynchronize(st));
    CUDA_CHECK(cudaStreamDestroy(st));
  }
  std::printf("ok rank %u iterations %u\n", o.rank, o.iterations);
  CUDA_CHECK(cudaFree(first_bad));
  if (o.vmm) {
    vmm_free_all();
  } else {
    CUDA_CHECK(cudaFree(send_dev));
    if (recv_dev != nullptr) CUDA_CHECK(cudaFree(recv_dev));
  }
  return 0;
}

uint8_t* gpu_alloc(const Options& o, uint64_t bytes) {
  if (o.vmm) return vmm_alloc(bytes, 3);
  uint8_t* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, bytes));
  return p;
}

// Every collective other than the all-gather path above, through the blocks of
// tests/support/collective_call.hpp: send blocks made by a kernel, receive blocks poisoned with
// their complement first, each block checked afterwards. Roots rotate with the iteration.
// Broadcast's one buffer is the receive buffer (GPU or pinned host memory).
int run_collective(const Options& o) {
  using iris::testing::Block;
  CUDA_CHECK(cudaSetDevice(0));
  auto client = connect(o);
  auto comm = iris::Communicator::init(client, o.key, o.nranks, o.rank);
  CUDA_CHECK(cudaFree(nullptr));
  const uint64_t area = o.nranks * (o.max_bytes + 3) + 128;
  uint8_t* send = gpu_alloc(o, area);
  auto send_buffer = client.register_cuda_buffer(send, area);
  iris::Buffer recv_buffer;
  uint8_t* recv = nullptr;
  if (o.host_recv) {
    recv_buffer = client.allocate(area);
    recv = recv_buffer.as<uint8_t>();
  } else {
    recv = gpu_alloc(o, area);
    recv_buffer = client.register_cuda_buffer(recv, area);
  }
  unsigned long long* first_bad = nullptr;
  CUDA_CHECK(cudaMalloc(&first_bad, sizeof(*first_bad)));
  cudaStream_t st = nullptr;
  if (o.stream) CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  const bool broadcast = o.collective == "broadcast";
  for (uint64_t it = 0; it < o.iterations; ++it) {
    const auto call =
        iris::testing::plan_call(o.nranks, o.rank, o.seed, o.collective, it, size_for(o, it));
    uint8_t* from = broadcast ? recv : send;
    if (o.host_recv) {
      CUDA_CHECK(cudaStreamSynchronize(st));  // nothing of the last iteration still reads it
      for (const Block& b : call.recv_blocks)
        for (uint64_t i = 0; i < b.bytes; ++i)
          recv[b.offset + i] = pattern_byte(o.seed, b.tag, it, i) ^ 0xff;
    } else {
      for (const Block& b : call.recv_blocks)
        fill_kernel<<<kBlocks, kThreads, 0, st>>>(recv + b.offset, b.bytes, o.seed, b.tag, it,
                                                  0xff);
    }
    for (const Block& b : call.send_blocks) {
      if (broadcast && o.host_recv) {
        for (uint64_t i = 0; i < b.bytes; ++i)
          from[b.offset + i] = pattern_byte(o.seed, b.tag, it, i);
      } else {
        fill_kernel<<<kBlocks, kThreads, 0, st>>>(from + b.offset, b.bytes, o.seed, b.tag, it, 0);
      }
    }
    CUDA_CHECK(cudaGetLastError());
    iris::Request request;
    if (o.stream) {
      request = iris::testing::submit_call(comm, call, from, recv, st);
    } else {
      CUDA_CHECK(cudaDeviceSynchronize());
      iris::testing::submit_call(comm, call, from, recv).wait();
    }
    // The send buffer is ours again once the collective is done: scribble over it first.
    if (!broadcast) CUDA_CHECK(cudaMemsetAsync(send, 0x5a, area, st));
    if (o.host_recv) CUDA_CHECK(cudaStreamSynchronize(st));
    for (const Block& b : call.recv_blocks) {
      uint64_t bad = b.bytes;
      if (o.host_recv) {
        for (uint64_t i = 0; i < b.bytes && bad == b.bytes; ++i)
          if (recv[b.offset + i] != pattern_byte(o.seed, b.tag, it, i)) bad = i;
      } else {
        unsigned long long none = ~0ull, found = 0;
        CUDA_CHECK(cudaMemcpyAsync(first_bad, &none, sizeof(none), cudaMemcpyHostToDevice, st));
        check_kernel<<<kBlocks, kThreads, 0, st>>>(recv + b.offset, b.bytes, o.seed, b.tag, it,
                                                   first_bad);
        CUDA_CHECK(cudaMemcpyAsync(&found, first_bad, sizeof(found), cudaMemcpyDeviceToHost, st));
        CUDA_CHECK(cudaStreamSynchronize(st));
        if (found != none) bad = found;
      }
      if (bad != b.bytes) {
        std::fprintf(stderr,
                     "rank %u iteration %llu %s (root %u, %llu bytes): block with tag %u at %llu "
                     "wrong at byte %llu (seed %llu)\n",
                     o.rank, static_cast<unsigned long long>(it), o.collective.c_str(), call.root,
                     static_cast<unsigned long long>(call.bytes), b.tag,
                     static_cast<unsigned long long>(b.offset),
                     static_cast<unsigned long long>(bad), static_cast<unsigned long long>(o.seed));
        return 2;
      }
    }
    if (request.valid()) request.wait();  // throws if the collective failed
  }
  if (st != nullptr) {
    CUDA_CHECK(cudaStreamSynchronize(st));
    CUDA_CHECK(cudaStreamDestroy(st));
  }
  std::printf("ok rank %u %s iterations %u\n", o.rank, o.collective.c_str(), o.iterations);
  CUDA_CHECK(cudaFree(first_bad));
  if (o.vmm) {
    vmm_free_all();
  } else {
    CUDA_CHECK(cudaFree(send));
    if (!o.host_recv) CUDA_CHECK(cudaFree(recv));
  }
  return 0;
}

}  // namespace iris::gpu_rank

int main(int argc, char** argv) {
  using namespace iris::gpu_rank;
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--socket")
      o.socket = next();
    else if (a == "--key")
      o.key = next();
    else if (a == "--nranks")
      o.nranks = static_cast<uint32_t>(std::stoul(next()));
    else if (a == "--rank")
      o.rank = static_cast<uint32_t>(std::stoul(next()));
    else if (a == "--seed")
      o.seed = std::stoull(next());
    else if (a == "--iterations")
      o.iterations = static_cast<uint32_t>(std::stoul(next()));
    else if (a == "--max-bytes")
      o.max_bytes = std::stoull(next());
    else if (a == "--host-recv")
      o.host_recv = true;
    else if (a == "--inplace")
      o.inplace = true;
    else if (a == "--vmm")
      o.vmm = true;
    else if (a == "--time-only")
      o.time_only = true;
    else if (a == "--stream")
      o.stream = true;
    else if (a == "--collective")
      o.collective = next();
    else if (a == "--graph")
      o.graph = true;
    else if (a == "--graphs")
      o.graphs = static_cast<uint32_t>(std::stoul(next()));
    else if (a == "--pause-every")
      o.pause_every = static_cast<uint32_t>(std::stoul(next()));
    else if (a == "--pause-dir")
      o.pause_dir = next();
    else if (a == "--outlive-daemon")
      o.outlive_daemon = true;
    else if (a == "--resume-window-ms")
      o.resume_window_ms = std::stoll(next());
    else if (a == "--die-after")
      o.die_after = static_cast<uint32_t>(std::stoul(next()));
    else {
      std::fprintf(stderr, "iris-gpu-rank: unknown argument %s\n", a.c_str());
      return 64;
    }
  }
  try {
    if (o.outlive_daemon) return run_outlive_daemon(o);
    if (o.graph) return run_graph(o);
    return o.collective == "all_gather" ? run(o) : run_collective(o);
  } catch (const iris::Error& e) {
    std::fprintf(stderr, "rank %u: %s\n", o.rank, e.what());
    return 10 + static_cast<int>(e.code());
  }
}
