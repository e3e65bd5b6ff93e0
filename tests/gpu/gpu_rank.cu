// iris-gpu-rank: one rank of a GPU all-gather test, a real client process of irisd with the cuda
// engine. Data is made by a kernel from (seed, rank, iteration), receive buffers are poisoned
// with its complement first, and every byte is checked afterwards (by a kernel for GPU memory).
// Exit status: 0 on success, 2 on a data mismatch, 3 on a CUDA error, 10 + iris::ErrorCode when
// libiris threw.
#include <cuda.h>
#include <cuda_runtime.h>

#include <signal.h>
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
#include "tests/support/collective_call.hpp"

namespace {

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

// Graph mode: the data depends on a replay counter in GPU memory that the graph itself advances,
// so that every replay moves new data with no host involvement.
__global__ void fill_replay_kernel(uint8_t* dst, uint64_t bytes, uint64_t seed, uint32_t tag,
                                   const uint64_t* replay, uint8_t invert) {
  const uint64_t it = *replay;
  for (uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; i < bytes;
       i += uint64_t{gridDim.x} * blockDim.x)
    dst[i] = pattern_byte(seed, tag, it, i) ^ invert;
}

__global__ void count_mismatches_kernel(const uint8_t* src, uint64_t bytes, uint64_t seed,
                                        uint32_t tag, const uint64_t* replay,
                                        unsigned long long* mismatches) {
  const uint64_t it = *replay;
  unsigned long long bad = 0;
  for (uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; i < bytes;
       i += uint64_t{gridDim.x} * blockDim.x)
    bad += src[i] != pattern_byte(seed, tag, it, i);
  if (bad != 0) atomicAdd(mismatches, bad);
}

__global__ void next_replay_kernel(uint64_t* replay) { ++*replay; }

struct Options {
  std::string socket;
  std::string key = "gpu";
  uint32_t nranks = 1, rank = 0, iterations = 10;
  uint64_t seed = 1, max_bytes = 1 << 20;
  bool host_recv = false, inplace = false, time_only = false, stream = false;
  bool vmm = false;  // GPU buffers from the VMM API, several allocations each
  std::string collective = "all_gather";
  // Graph mode: captured once, replayed `iterations` times; `graphs` times over (captured,
  // replayed, destroyed), pausing after each round of `pause_every` graphs when `pause_dir` is
  // set (the test reads irisd's state meanwhile); `die_after` replays, then this rank is killed.
  bool graph = false;
  // Waits (stream-ordered, and in graph replays) for a rank that never comes, says so at pause
  // point 1 of pause_dir, and expects irisd's death to let its streams go on.
  bool outlive_daemon = false;
  uint32_t graphs = 1, pause_every = 0, die_after = 0;
  std::string pause_dir;
  int64_t resume_window_ms = -1;  // ClientOptions::resume_window; -1: irisd's default
};

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

constexpr int kBlocks = 1024, kThreads = 256;

iris::Client connect(const Options& o) {
  iris::ClientOptions options;
  options.socket_path = o.socket;
  options.client_name = "iris-gpu-rank " + std::to_string(o.rank);
  if (o.resume_window_ms >= 0) options.resume_window = std::chrono::milliseconds(o.resume_window_ms);
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

// GPU memory for a test buffer: cudaMalloc, or VMM allocations (three, back to back).
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

// Waits for the test at a pause point: says it is there (DIR/paused-K-RANK), goes on once
// DIR/resume-K exists.
void pause_for_test(const Options& o, uint32_t point) {
  const std::string prefix = o.pause_dir + "/";
  std::FILE* f = std::fopen(
      (prefix + "paused-" + std::to_string(point) + "-" + std::to_string(o.rank)).c_str(), "w");
  if (f != nullptr) std::fclose(f);
  const std::string resume = prefix + "resume-" + std::to_string(point);
  for (int i = 0; i < 6000; ++i) {
    if (std::FILE* r = std::fopen(resume.c_str(), "r")) {
      std::fclose(r);
      return;
    }
    usleep(10000);
  }
  std::fprintf(stderr, "rank %u: not resumed at pause %u\n", o.rank, point);
  std::exit(4);
}

// A producer kernel, the collective and a checking kernel captured into a CUDA graph and
// replayed: each replay's data comes from a replay counter in GPU memory that the graph
// advances; mismatches are counted in GPU memory and read once at the end.
int run_graph(const Options& o) {
  CUDA_CHECK(cudaSetDevice(0));
  auto client = connect(o);
  auto comm = iris::Communicator::init(client, o.key, o.nranks, o.rank);
  CUDA_CHECK(cudaFree(nullptr));
  const bool all_to_all = o.collective == "all_to_all";
  // send_recv: a ring of point-to-point transfers, one group (send to the next rank, receive
  // from the one before) on the one stream.
  const bool ring = o.collective == "send_recv";
  const uint32_t next = (o.rank + 1) % o.nranks;
  const uint32_t prev = (o.rank + o.nranks - 1) % o.nranks;
  const uint64_t bytes = o.max_bytes;  // per block
  const uint64_t send_bytes = bytes * (all_to_all ? o.nranks : 1);
  const uint64_t recv_bytes = bytes * o.nranks;
  uint8_t* send = gpu_alloc(o, send_bytes);
  uint8_t* recv = gpu_alloc(o, recv_bytes);
  auto send_buffer = client.register_cuda_buffer(send, send_bytes);
  auto recv_buffer = client.register_cuda_buffer(recv, recv_bytes);
  uint64_t* replay = nullptr;
  unsigned long long* mismatches = nullptr;
  CUDA_CHECK(cudaMalloc(&replay, sizeof(*replay)));
  CUDA_CHECK(cudaMalloc(&mismatches, sizeof(*mismatches)));
  CUDA_CHECK(cudaMemset(replay, 0, sizeof(*replay)));
  CUDA_CHECK(cudaMemset(mismatches, 0, sizeof(*mismatches)));
  cudaStream_t st;
  CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  // Tags: all-gather block r is rank r's; all-to-all and send_recv block (s -> d) is s * 64 + d.
  const bool per_pair = all_to_all || ring;
  auto send_tag = [&](uint32_t peer) { return per_pair ? o.rank * 64 + peer : o.rank; };
  auto recv_tag = [&](uint32_t src) { return per_pair ? src * 64 + o.rank : src; };
  uint64_t replays = 0;
  for (uint32_t g = 0; g < o.graphs; ++g) {
    cudaGraph_t graph;
    CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    for (uint32_t src = 0; src < o.nranks; ++src)
      fill_replay_kernel<<<kBlocks, kThreads, 0, st>>>(recv + src * bytes, bytes, o.seed,
                                                       recv_tag(src), replay, 0xff);
    for (uint32_t peer = 0; peer < (all_to_all ? o.nranks : 1); ++peer)
      fill_replay_kernel<<<kBlocks, kThreads, 0, st>>>(send + peer * bytes, bytes, o.seed,
                                                       send_tag(ring ? next : peer), replay, 0);
    iris::Request none, also_none;
    if (ring) {
      iris::group_start();
      none = comm.send(send, bytes, next, st);
      also_none = comm.recv(recv + prev * bytes, bytes, prev, st);
      iris::group_end();
    } else {
      none = all_to_all ? comm.all_to_all(send, recv, bytes, st)
                        : comm.all_gather(send, recv, bytes, st);
    }
    for (uint32_t src = 0; src < o.nranks; ++src)
      if (!ring || src == prev)
        count_mismatches_kernel<<<kBlocks, kThreads, 0, st>>>(recv + src * bytes, bytes, o.seed,
                                                              recv_tag(src), replay, mismatches);
    next_replay_kernel<<<1, 1, 0, st>>>(replay);
    CUDA_CHECK(cudaStreamEndCapture(st, &graph));
    if (none.valid() || also_none.valid()) {
      std::fprintf(stderr, "rank %u: a captured collective returned a request to wait on\n",
                   o.rank);
      return 5;
    }
    cudaGraphExec_t exec;
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (uint32_t i = 0; i < o.iterations; ++i) {
      if (o.die_after != 0 && replays == o.die_after) {
        CUDA_CHECK(cudaStreamSynchronize(st));
        std::printf("rank %u dies after %llu replays\n", o.rank,
                    static_cast<unsigned long long>(replays));
        std::fflush(stdout);
        raise(SIGKILL);
      }
      CUDA_CHECK(cudaGraphLaunch(exec, st));
      ++replays;
    }
    CUDA_CHECK(cudaStreamSynchronize(st));
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaGraphDestroy(graph));
    if (!o.pause_dir.empty() && o.pause_every != 0 && (g + 1) % o.pause_every == 0) {
      comm.barrier();  // every rank has destroyed this round's graphs
      pause_for_test(o, (g + 1) / o.pause_every);
    }
  }
  unsigned long long bad = 0;
  uint64_t replayed = 0;
  CUDA_CHECK(cudaMemcpy(&bad, mismatches, sizeof(bad), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(&replayed, replay, sizeof(replayed), cudaMemcpyDeviceToHost));
  client.check_graphs();  // throws the failure of a replay whose collective failed
  if (bad != 0 || replayed != replays) {
    std::fprintf(stderr, "rank %u: %llu mismatched bytes over %llu replays (%llu counted)\n",
                 o.rank, bad, static_cast<unsigned long long>(replays),
                 static_cast<unsigned long long>(replayed));
    return 2;
  }
  std::printf("ok rank %u %s graph replays %llu\n", o.rank, o.collective.c_str(),
              static_cast<unsigned long long>(replays));
  CUDA_CHECK(cudaStreamDestroy(st));
  return 0;
}

__global__ void set_kernel(uint32_t* flag) { *flag = 1; }

// irisd dies while this rank's streams wait on it: a stream-ordered all-gather with a kernel
// queued behind it, and a replay of a CUDA graph holding an all-gather. Both streams must go on
// (libiris releases them), later replays too (a launch of a graph whose last launch still waits
// would block the host, so they come after), and the host calls then report daemon_gone.
int run_outlive_daemon(const Options& o) {
  CUDA_CHECK(cudaSetDevice(0));
  auto client = connect(o);
  auto comm = iris::Communicator::init(client, o.key, o.nranks, o.rank);
  uint8_t* send = gpu_alloc(o, 4096);
  uint8_t* recv = gpu_alloc(o, 4096 * o.nranks);
  uint32_t* after = nullptr;
  CUDA_CHECK(cudaMalloc(&after, sizeof(*after)));
  // Launched once first: CUDA loads a kernel's module at its first launch (lazy loading), and
  // that load waits for the streams below, which wait for irisd.
  set_kernel<<<1, 1>>>(after);
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaMemset(after, 0, sizeof(*after)));
  cudaStream_t st, replays;
  CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&replays, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_CHECK(cudaStreamBeginCapture(replays, cudaStreamCaptureModeGlobal));
  comm.all_gather(send, recv, 4096, replays);
  CUDA_CHECK(cudaStreamEndCapture(replays, &graph));
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  iris::Request pending = comm.all_gather(send, recv, 4096, st);
  set_kernel<<<1, 1, 0, st>>>(after);
  CUDA_CHECK(cudaGraphLaunch(exec, replays));
  usleep(200000);
  if (cudaStreamQuery(st) != cudaErrorNotReady || cudaStreamQuery(replays) != cudaErrorNotReady) {
    std::fprintf(stderr, "rank %u: a stream went on before irisd died\n", o.rank);
    return 5;
  }
  pause_for_test(o, 1);  // the test kills irisd, then lets this go on
  CUDA_CHECK(cudaStreamSynchronize(st));
  CUDA_CHECK(cudaStreamSynchronize(replays));
  for (int i = 0; i < 3; ++i) CUDA_CHECK(cudaGraphLaunch(exec, replays));
  CUDA_CHECK(cudaStreamSynchronize(replays));
  uint32_t ran = 0;
  CUDA_CHECK(cudaMemcpy(&ran, after, sizeof(ran), cudaMemcpyDeviceToHost));
  if (ran != 1) return 6;
  int failures = 0;
  auto expect_gone = [&](const char* what, auto&& call) {
    try {
      call();
      std::fprintf(stderr, "rank %u: %s succeeded after irisd died\n", o.rank, what);
    } catch (const iris::Error& e) {
      if (e.code() == iris::ErrorCode::kDaemonGone) return;
      std::fprintf(stderr, "rank %u: %s: %s\n", o.rank, what, e.what());
    }
    ++failures;
  };
  expect_gone("wait", [&] { pending.wait(); });
  expect_gone("check_graphs", [&] { client.check_graphs(); });
  expect_gone("a new all-gather", [&] { comm.all_gather(send, recv, 4096, st); });
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  if (failures != 0) return 7;
  std::printf("ok rank %u: streams went on after irisd died; calls report daemon_gone\n", o.rank);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
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
