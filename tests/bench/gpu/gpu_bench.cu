// iris-gpu-bench: one rank of the GPU benchmark (not a test); start nranks copies, rank 0 prints.
//   sweep: per size, host-blocking and stream-ordered all-gather (or, with --collective
//          all_to_all, all-to-all: the same n x n copies) latency (p50, p99, the slowest
//          rank's time), bytes moved per second, and the raw copy ceiling for the same copies
//          (cudaMemcpyAsync of the nranks x nranks blocks by one process) measured in the run;
//          then throughput back to back (kBurst collectives submitted before waiting, as
//          nccl-tests times its iterations) against the ceiling for kBurst batches of copies.
//          With --load-calls N, no tables: N blocking collectives back to back, the sizes in
//          turn, as another tenant's background load.
//   graph: per size, an all-gather issued stream-ordered (kGraphCalls back to back on one
//          stream, then one synchronize) against the same all-gather captured into a CUDA graph
//          and replayed kGraphCalls times: time per call / per replay (the slowest rank's).
//   submit: the host's cost of one stream-ordered all-gather call (kSubmitCalls calls of
//          min-bytes enqueued on one stream, timed on the host, then synchronized): the C++
//          figure tests/bench/gpu/call_overhead.py compares the Python binding with.
//   gemm:  throughput of a bf16 GEMM kernel alone, while irisd runs all-gathers into host memory
//          back to back, and while an SM-kernel gather of the same layout runs beside it.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "iris/iris.hpp"
#include "tests/gpu/cuda_check.cuh"

namespace {

constexpr int kBurst = 10;        // collectives in flight for the back-to-back figures
constexpr int kBurstSamples = 5;  // back-to-back samples per size

struct Options {
  std::string socket, mode = "sweep", key = "gpu-bench";
  uint32_t nranks = 1, rank = 0;
  uint64_t min_bytes = 4096, max_bytes = 256ull << 20;
  bool host_recv = false;
  double gemm_seconds = 2.0;
  std::string collective = "all_gather";  // sweep: or all_to_all
  // sweep: rank 0 times the ceiling (its own copies, outside irisd); 0 for a background load,
  // whose bytes must all go through irisd (scripts/gpu-run.sh's tenants).
  bool ceiling = true;
  // sweep: more than 0, no tables: this many blocking collectives back to back, the sizes from
  // min to max in turn (a background load, as long as the caller lets it run).
  uint64_t load_calls = 0;
};

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * (v.size() - 1) + 0.5))];
}

// 64x64 output tile per block, 16x16 threads, 4x4 outputs each, fp32 accumulation.
constexpr int kTile = 64, kK = 16;
__global__ void gemm_bf16(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* c, int n) {
  __shared__ __nv_bfloat16 as[kTile][kK];
  __shared__ __nv_bfloat16 bs[kK][kTile];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row0 = blockIdx.y * kTile, col0 = blockIdx.x * kTile;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < n; k0 += kK) {
    for (int i = ty * 16 + tx; i < kTile * kK; i += 256) {
      as[i / kK][i % kK] = a[(row0 + i / kK) * n + k0 + i % kK];
      bs[i / kTile][i % kTile] = b[(k0 + i / kTile) * n + col0 + i % kTile];
    }
    __syncthreads();
    for (int k = 0; k < kK; ++k)
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j)
          acc[i][j] += __bfloat162float(as[ty * 4 + i][k]) * __bfloat162float(bs[k][tx * 4 + j]);
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j)
      c[(row0 + ty * 4 + i) * n + col0 + tx * 4 + j] = __float2bfloat16(acc[i][j]);
}

// The SM-kernel gather: every thread copies 16-byte words of the nranks x nranks blocks.
__global__ void sm_gather(const uint4* send, uint4* recv, uint64_t words_per_block, int nranks) {
  const uint64_t total = words_per_block * nranks * nranks;
  for (uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; i < total;
       i += uint64_t{gridDim.x} * blockDim.x) {
    const uint64_t block = i / words_per_block, w = i % words_per_block;
    recv[(block % nranks) * words_per_block * nranks + (block / nranks) * words_per_block + w] =
        send[w];
  }
}

struct Rank {
  const Options& o;
  iris::Client client;
  iris::Communicator comm;
  iris::Buffer tsend, trecv;  // host: barrier and time exchange
  Rank(const Options& opts)
      : o(opts),
        client(iris::Client::connect([&] {
          iris::ClientOptions c;
          c.socket_path = opts.socket;
          c.client_name = "iris-gpu-bench " + std::to_string(opts.rank);
          return c;
        }())),
        comm(iris::Communicator::init(client, opts.key, opts.nranks, opts.rank)),
        tsend(client.allocate(8)),
        trecv(client.allocate(8 * opts.nranks)) {}

  void barrier() { comm.barrier(); }
  double slowest(double mine) {
    std::memcpy(tsend.data(), &mine, 8);
    comm.all_gather(tsend.data(), trecv.data(), 8).wait();
    double m = 0;
    for (uint32_t r = 0; r < o.nranks; ++r) m = std::max(m, trecv.as<double>()[r]);
    return m;
  }
};

void sweep(const Options& o) {
  Rank rank(o);
  CUDA_CHECK(cudaSetDevice(0));
  void *send = nullptr, *recv = nullptr;
  const bool all_to_all = o.collective == "all_to_all";
  const uint64_t send_bytes = o.max_bytes * (all_to_all ? o.nranks : 1);
  CUDA_CHECK(cudaMalloc(&send, send_bytes));
  CUDA_CHECK(cudaMemset(send, 1, send_bytes));
  auto send_buf = rank.client.register_cuda_buffer(send, send_bytes);
  // The collective under test; `bytes` is one block either way (n x n block copies in all).
  auto collective = [&](uint64_t bytes, iris::Stream stream = {}) {
    return all_to_all ? rank.comm.all_to_all(send, recv, bytes, stream)
                      : rank.comm.all_gather(send, recv, bytes, stream);
  };
  iris::Buffer recv_buf;
  if (o.host_recv) {
    recv_buf = rank.client.allocate(o.max_bytes * o.nranks);
    std::memset(recv_buf.data(), 2, recv_buf.size());
    recv = recv_buf.data();
  } else {
    CUDA_CHECK(cudaMalloc(&recv, o.max_bytes * o.nranks));
    recv_buf = rank.client.register_cuda_buffer(recv, o.max_bytes * o.nranks);
  }
  if (o.load_calls > 0) {
    std::vector<uint64_t> sizes;
    for (uint64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 4) sizes.push_back(bytes);
    for (uint64_t i = 0; i < o.load_calls; ++i) collective(sizes[i % sizes.size()]).wait();
    return;
  }
  cudaStream_t st;
  CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::vector<cudaStream_t> copy_streams(std::max(prop.asyncEngineCount, 1));
  std::vector<cudaEvent_t> joins(copy_streams.size());
  for (std::size_t i = 0; i < copy_streams.size(); ++i) {
    CUDA_CHECK(cudaStreamCreateWithFlags(&copy_streams[i], cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&joins[i], cudaEventDisableTiming));
  }
  // The ceiling's own buffers (rank 0): nranks distinct sources and nranks distinct receive
  // buffers, as the collective touches, so that no copy is served from L2 (50 MB on the H200)
  // that the collective would have to read from HBM. (Until 2026-11-29 the ceiling copied one
  // source into one receive buffer nranks times, which L2 flattered below ~32 MiB per rank.)
  char* ceiling_src = nullptr;
  char* ceiling_dst = nullptr;
  if (o.rank == 0) {
    CUDA_CHECK(cudaMalloc(&ceiling_src, o.max_bytes * o.nranks));
    CUDA_CHECK(cudaMemset(ceiling_src, 3, o.max_bytes * o.nranks));
    if (o.host_recv) {
      CUDA_CHECK(cudaMallocHost(&ceiling_dst, o.max_bytes * o.nranks * o.nranks));
    } else {
      CUDA_CHECK(cudaMalloc(&ceiling_dst, o.max_bytes * o.nranks * o.nranks));
    }
  }
  if (o.rank == 0)
    std::printf(
        "| bytes/block | blocking p50 us | blocking p99 us | stream p50 us | stream p99 us "
        "| moved GB/s | ceiling GB/s | ratio | back-to-back us | back-to-back GB/s | "
        "back-to-back ceiling GB/s | back-to-back ratio |\n| ---: | ---: | ---: | ---: | "
        "---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (uint64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 4) {
    const uint64_t moved = bytes * o.nranks * o.nranks;
    const int iters = static_cast<int>(std::clamp<uint64_t>((8ull << 30) / moved, 5, 200));
    std::vector<double> blocking, streamed;
    for (int i = 0; i < iters + 2; ++i) {
      rank.barrier();
      const auto t0 = std::chrono::steady_clock::now();
      collective(bytes).wait();
      const double us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      const double worst = rank.slowest(us);
      if (i >= 2) blocking.push_back(worst);
    }
    for (int i = 0; i < iters + 2; ++i) {
      rank.barrier();
      CUDA_CHECK(cudaEventRecord(e0, st));
      auto request = collective(bytes, st);
      CUDA_CHECK(cudaEventRecord(e1, st));
      CUDA_CHECK(cudaEventSynchronize(e1));
      request.wait();
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
      const double worst = rank.slowest(ms * 1e3);
      if (i >= 2) streamed.push_back(worst);
    }
    // Back to back: kBurst collectives in flight at once, time per collective.
    std::vector<double> burst;
    for (int i = 0; i < kBurstSamples + 1; ++i) {  // the first warms up
      rank.barrier();
      const auto t0 = std::chrono::steady_clock::now();
      std::vector<iris::Request> requests;
      for (int k = 0; k < kBurst; ++k) requests.push_back(collective(bytes));
      for (iris::Request& r : requests) r.wait();
      const double us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      const double worst = rank.slowest(us / kBurst);
      if (i >= 1) burst.push_back(worst);
    }
    // The ceiling: the same nranks x nranks copies between as many distinct buffers, by one
    // process, plain cudaMemcpyAsync spread over as many streams as the GPU has copy engines
    // (irisd's own layout), timed by events; `batches` sets back to back, time per set.
    auto ceiling_of = [&](int batches) {
      std::vector<float> ms_runs;
      for (int i = 0; i < 5; ++i) {
        CUDA_CHECK(cudaEventRecord(e0, st));
        for (auto& c : copy_streams) {
          CUDA_CHECK(cudaStreamWaitEvent(c, e0));
        }
        int k = 0;
        for (int b = 0; b < batches; ++b)
          for (uint32_t src = 0; src < o.nranks; ++src)
            for (uint32_t dst = 0; dst < o.nranks; ++dst)
              CUDA_CHECK(cudaMemcpyAsync(ceiling_dst + (dst * o.nranks + src) * bytes,
                                         ceiling_src + src * bytes, bytes, cudaMemcpyDefault,
                                         copy_streams[k++ % copy_streams.size()]));
        for (auto& c : copy_streams) {
          CUDA_CHECK(cudaEventRecord(joins[&c - copy_streams.data()], c));
          CUDA_CHECK(cudaStreamWaitEvent(st, joins[&c - copy_streams.data()]));
        }
        CUDA_CHECK(cudaEventRecord(e1, st));
        CUDA_CHECK(cudaEventSynchronize(e1));
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        ms_runs.push_back(ms / batches);
      }
      std::sort(ms_runs.begin(), ms_runs.end());
      return moved / (ms_runs[2] * 1e6);
    };
    if (o.rank == 0) {
      const double ceiling = o.ceiling ? ceiling_of(1) : 0;
      const double burst_ceiling = o.ceiling ? ceiling_of(kBurst) : 0;
      const double burst_us = percentile(burst, 0.5);
      const double burst_gbps = moved / (burst_us * 1e3);
      const double p50 = percentile(blocking, 0.5);
      const double gbps = moved / (p50 * 1e3);
      std::printf(
          "| %llu | %.1f | %.1f | %.1f | %.1f | %.2f | %.2f | %.2f | %.1f | %.2f | %.2f | %.2f |\n",
          static_cast<unsigned long long>(bytes), p50, percentile(blocking, 0.99),
          percentile(streamed, 0.5), percentile(streamed, 0.99), gbps, ceiling, gbps / ceiling,
          burst_us, burst_gbps, burst_ceiling, burst_gbps / burst_ceiling);
      std::fflush(stdout);
    }
  }
}

// Phases: 0 GEMM alone, 1 with irisd all-gathers into host memory, 2 with the SM-kernel gather.
// In phase 1 every rank all-gathers back to back; rank 0 puts a stop word at the start of its
// block when its GEMMs are done, and the others leave the loop when they receive it.
void gemm(const Options& o) {
  Rank rank(o);
  CUDA_CHECK(cudaSetDevice(0));
  const uint64_t bytes = 64ull << 20;
  const uint64_t kGo = 0, kStop = 0x53544f50;  // "STOP"
  void* send = nullptr;
  void* dev_recv = nullptr;
  CUDA_CHECK(cudaMalloc(&send, bytes));
  CUDA_CHECK(cudaMalloc(&dev_recv, bytes));
  CUDA_CHECK(cudaMemset(send, 0, bytes));
  auto send_buf = rank.client.register_cuda_buffer(send, bytes);
  auto host_recv = rank.client.allocate(bytes * o.nranks);
  std::memset(host_recv.data(), 0, host_recv.size());
  auto set_word = [&](uint64_t w) { CUDA_CHECK(cudaMemcpy(send, &w, 8, cudaMemcpyHostToDevice)); };
  if (o.rank != 0) {
    for (int phase = 0; phase < 3; ++phase) {
      rank.barrier();
      if (phase == 1) {
        uint64_t word = kGo;
        while (word != kStop) {
          rank.comm.all_gather(send, host_recv.data(), bytes).wait();
          std::memcpy(&word, host_recv.data(), 8);  // rank 0's block
        }
      }
      rank.barrier();
    }
    return;
  }
  const int n = 8192;
  __nv_bfloat16 *a, *b, *c;
  CUDA_CHECK(cudaMalloc(&a, sizeof(__nv_bfloat16) * n * n));
  CUDA_CHECK(cudaMalloc(&b, sizeof(__nv_bfloat16) * n * n));
  CUDA_CHECK(cudaMalloc(&c, sizeof(__nv_bfloat16) * n * n));
  CUDA_CHECK(cudaMemset(a, 0x3c, sizeof(__nv_bfloat16) * n * n));  // ~1.0, not zeros
  CUDA_CHECK(cudaMemset(b, 0x3c, sizeof(__nv_bfloat16) * n * n));
  cudaStream_t gemm_stream, gather_stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&gemm_stream, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&gather_stream, cudaStreamNonBlocking));
  const dim3 grid(n / kTile, n / kTile), block(16, 16);
  gemm_bf16<<<grid, block, 0, gemm_stream>>>(a, b, c, n);  // warm up
  CUDA_CHECK(cudaStreamSynchronize(gemm_stream));
  const char* names[] = {"GEMM alone", "with irisd all-gathers, 64 MiB/rank into host memory",
                         "with an SM-kernel gather of 64 MiB"};
  std::printf("| phase | GEMM TFLOP/s | vs alone | gathers |\n| --- | ---: | ---: | ---: |\n");
  double alone = 0;
  for (int phase = 0; phase < 3; ++phase) {
    rank.barrier();
    set_word(kGo);
    int gemms = 0;
    std::atomic<int> gathers{0};
    const auto start = std::chrono::steady_clock::now();
    auto elapsed = [&] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    // Gathers run from a second host thread, back to back, so the GEMM stream never waits on
    // the host; the GEMMs are queued ahead (two batches in flight).
    std::atomic<bool> stop{false};
    std::thread gatherer([&] {
      while (!stop.load()) {
        if (phase == 1) {
          rank.comm.all_gather(send, host_recv.data(), bytes).wait();
          ++gathers;
        } else if (phase == 2) {
          sm_gather<<<264, 512, 0, gather_stream>>>(static_cast<uint4*>(send),
                                                    static_cast<uint4*>(dev_recv), bytes / 16, 1);
          CUDA_CHECK(cudaStreamSynchronize(gather_stream));
          ++gathers;
        } else {
          break;
        }
      }
    });
    cudaEvent_t batch_done[2];
    CUDA_CHECK(cudaEventCreate(&batch_done[0]));
    CUDA_CHECK(cudaEventCreate(&batch_done[1]));
    for (int batch = 0; elapsed() < o.gemm_seconds; ++batch) {
      if (batch >= 2) CUDA_CHECK(cudaEventSynchronize(batch_done[batch % 2]));
      for (int i = 0; i < 4; ++i) gemm_bf16<<<grid, block, 0, gemm_stream>>>(a, b, c, n);
      gemms += 4;
      CUDA_CHECK(cudaEventRecord(batch_done[batch % 2], gemm_stream));
    }
    CUDA_CHECK(cudaStreamSynchronize(gemm_stream));
    stop.store(true);
    gatherer.join();
    const double seconds = elapsed();
    if (phase == 1) {
      set_word(kStop);
      rank.comm.all_gather(send, host_recv.data(), bytes).wait();
    }
    const double tflops = 2.0 * n * n * double(n) * gemms / seconds / 1e12;
    if (phase == 0) alone = tflops;
    std::printf("| %s | %.2f | %.3f | %d |\n", names[phase], tflops, tflops / alone,
                gathers.load());
    std::fflush(stdout);
    rank.barrier();
  }
}

constexpr int kGraphCalls = 50;
constexpr int kSubmitCalls = 2000;

void submit_cost(const Options& o) {
  Rank rank(o);
  CUDA_CHECK(cudaSetDevice(0));
  void *send = nullptr, *recv = nullptr;
  CUDA_CHECK(cudaMalloc(&send, o.min_bytes));
  CUDA_CHECK(cudaMalloc(&recv, o.min_bytes * o.nranks));
  auto send_buf = rank.client.register_cuda_buffer(send, o.min_bytes);
  auto recv_buf = rank.client.register_cuda_buffer(recv, o.min_bytes * o.nranks);
  cudaStream_t st;
  CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  for (int sample = 0; sample < 3; ++sample) {  // the first warms up
    std::vector<iris::Request> requests;
    requests.reserve(kSubmitCalls);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kSubmitCalls; ++i)
      requests.push_back(rank.comm.all_gather(send, recv, o.min_bytes, st));
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    CUDA_CHECK(cudaStreamSynchronize(st));
    for (iris::Request& r : requests) r.wait();
    if (sample > 0 && o.rank == 0)
      std::printf("C++: %d stream-ordered %llu-byte all-gathers, host time per call %.2f us\n",
                  kSubmitCalls, static_cast<unsigned long long>(o.min_bytes), us / kSubmitCalls);
  }
  CUDA_CHECK(cudaStreamDestroy(st));
}

void graph_vs_eager(const Options& o) {
  Rank rank(o);
  CUDA_CHECK(cudaSetDevice(0));
  void *send = nullptr, *recv = nullptr;
  CUDA_CHECK(cudaMalloc(&send, o.max_bytes));
  CUDA_CHECK(cudaMalloc(&recv, o.max_bytes * o.nranks));
  CUDA_CHECK(cudaMemset(send, 1, o.max_bytes));
  auto send_buf = rank.client.register_cuda_buffer(send, o.max_bytes);
  auto recv_buf = rank.client.register_cuda_buffer(recv, o.max_bytes * o.nranks);
  cudaStream_t st;
  CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  if (o.rank == 0)
    std::printf(
        "| bytes/rank | eager us/call | graph us/replay | graph / eager |\n| ---: | ---: | ---: "
        "| ---: |\n");
  auto timed = [&](auto&& issue) {
    rank.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    issue();
    CUDA_CHECK(cudaStreamSynchronize(st));
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    return rank.slowest(us / kGraphCalls);
  };
  for (uint64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 4) {
    std::vector<double> eager, replayed;
    cudaGraph_t graph;
    CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    rank.comm.all_gather(send, recv, bytes, st);
    CUDA_CHECK(cudaStreamEndCapture(st, &graph));
    cudaGraphExec_t exec;
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int sample = 0; sample < 4; ++sample) {  // the first of each warms up
      const double e = timed([&] {
        std::vector<iris::Request> requests;
        for (int i = 0; i < kGraphCalls; ++i)
          requests.push_back(rank.comm.all_gather(send, recv, bytes, st));
        CUDA_CHECK(cudaStreamSynchronize(st));
        for (iris::Request& r : requests) r.wait();
      });
      const double g = timed([&] {
        for (int i = 0; i < kGraphCalls; ++i) CUDA_CHECK(cudaGraphLaunch(exec, st));
      });
      if (sample > 0) {
        eager.push_back(e);
        replayed.push_back(g);
      }
    }
    rank.client.check_graphs();
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaGraphDestroy(graph));
    const double e = percentile(eager, 0.5), g = percentile(replayed, 0.5);
    if (o.rank == 0)
      std::printf("| %llu | %.1f | %.1f | %.2f |\n", static_cast<unsigned long long>(bytes), e, g,
                  g / e);
  }
  CUDA_CHECK(cudaStreamDestroy(st));
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--socket")
      o.socket = v;
    else if (a == "--mode")
      o.mode = v;
    else if (a == "--key")
      o.key = v;
    else if (a == "--nranks")
      o.nranks = std::stoul(v);
    else if (a == "--rank")
      o.rank = std::stoul(v);
    else if (a == "--min-bytes")
      o.min_bytes = std::stoull(v);
    else if (a == "--max-bytes")
      o.max_bytes = std::stoull(v);
    else if (a == "--host-recv")
      o.host_recv = v == "1";
    else if (a == "--gemm-seconds")
      o.gemm_seconds = std::stod(v);
    else if (a == "--collective")
      o.collective = v;
    else if (a == "--ceiling")
      o.ceiling = v == "1";
    else if (a == "--load-calls")
      o.load_calls = std::stoull(v);
  }
  try {
    if (o.mode == "gemm") {
      gemm(o);
    } else if (o.mode == "graph") {
      graph_vs_eager(o);
    } else if (o.mode == "submit") {
      submit_cost(o);
    } else {
      sweep(o);
    }
  } catch (const iris::Error& e) {
    std::fprintf(stderr, "rank %u: %s\n", o.rank, e.what());
    return 1;
  }
  return 0;
}
