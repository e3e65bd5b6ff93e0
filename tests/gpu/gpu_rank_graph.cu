// iris-gpu-rank's CUDA graph modes (see gpu_rank.cu): collectives captured into graphs and
// replayed with new data each replay, and streams that must go on when irisd dies under them.
#include <cuda_runtime.h>

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/gpu/cuda_check.cuh"
#include "tests/gpu/gpu_pattern.cuh"
#include "tests/gpu/gpu_rank.cuh"

namespace iris::gpu_rank {

namespace {

using iris::gpu_test::pattern_byte;

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

}  // namespace

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

}  // namespace iris::gpu_rank
