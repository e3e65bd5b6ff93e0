// One rank of a C-style program on irisd's libnccl.so.2 with GPU streams, as NCCL programs are
// written: a kernel fills the send buffer, the NCCL call is queued on the same stream, a kernel
// after it checks the result on the GPU, and the host synchronizes only at the end. Every
// operation, three rounds over the same buffers (so stale data shows). Run by
// scripts/gpu-run.sh with ranks sharing the GPU.
//   iris-gpu-nccl-rank --id-file F --nranks N --rank R [--case ops|loops|abort|latency]
//                      [--stop-file S]
// ops: every operation checked; loops: checked all-reduces and all-gathers until the stop file
// appears (irisd is restarted meanwhile); abort: rank 0 queues an all-gather that rank 1 never
// joins, with a kernel after it, then calls ncclCommAbort: its stream must finish (bounded).
// latency (a benchmark, not a test): the median time of a 4 KiB all-gather, back to back, on a
// stream with device memory (the call's return and the stream's end) and with host memory and
// a null stream (irisd's collective alone, waited for on the host), to tell the library's cost
// on a stream from irisd's.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "client/nccl/include/nccl.h"
#include "tests/gpu/cuda_check.cuh"

namespace {

#define NCCL_CHECK(call)                                                      \
  do {                                                                        \
    const ncclResult_t r_ = (call);                                           \
    if (r_ != ncclSuccess) {                                                  \
      std::fprintf(stderr, "%s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call, \
                   ncclGetErrorString(r_), ncclGetLastError(nullptr));        \
      std::exit(4);                                                           \
    }                                                                         \
  } while (0)

enum class Op {
  kAllGather,
  kAllReduce,
  kReduceScatter,
  kReduce,
  kBroadcast,
  kAlltoAll,
  kGather,
  kScatter,
  kSendRecv,
  kCount
};
const char* const kOpNames[] = {"AllGather", "AllReduce", "ReduceScatter", "Reduce",  "Broadcast",
                                "AlltoAll",  "Gather",    "Scatter",       "SendRecv"};

struct Job {
  int nranks, rank, round;
  size_t n;  // elements per block
};

__host__ __device__ int value(int rank, int round, size_t i) {
  return rank * 1000 + round * 7 + static_cast<int>(i % 101);
}

__global__ void fill(int* p, size_t count, int rank, int round, size_t offset) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x)
    p[i] = value(rank, round, offset + i);
}

__device__ int expected(Op op, const Job& j, int root, size_t i) {
  int sum = 0;
  switch (op) {
    case Op::kAllGather:
    case Op::kGather:
      return value(static_cast<int>(i / j.n), j.round, i % j.n);
    case Op::kAllReduce:
    case Op::kReduce:
      for (int r = 0; r < j.nranks; ++r) sum += value(r, j.round, i);
      return sum;
    case Op::kReduceScatter:
      for (int r = 0; r < j.nranks; ++r) sum += value(r, j.round, j.rank * j.n + i);
      return sum;
    case Op::kBroadcast:
      return value(root, j.round, i);
    case Op::kAlltoAll:
      return value(static_cast<int>(i / j.n), j.round, j.rank * j.n + i % j.n);
    case Op::kScatter:
      return value(root, j.round, j.rank * j.n + i);
    case Op::kSendRecv:
      return value((j.rank + j.nranks - 1) % j.nranks, j.round, i);
    default:
      return -1;
  }
}

__global__ void check(const int* p, size_t count, Op op, Job j, int root, unsigned long long* bad) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x)
    if (p[i] != expected(op, j, root, i)) atomicAdd(bad + static_cast<int>(op), 1ull);
}

// Queues fill, the operation and the check of `op` on `stream`.
void queue_op(Op op, const Job& j, int* send, int* recv, ncclComm_t comm, cudaStream_t stream,
              unsigned long long* bad) {
  const size_t n = j.n, all = n * j.nranks;
  const int root = j.round % j.nranks;
  const bool whole_send = op == Op::kReduceScatter || op == Op::kAlltoAll || op == Op::kScatter;
  fill<<<64, 256, 0, stream>>>(send, whole_send ? all : n, j.rank, j.round, 0);
  CUDA_CHECK(cudaGetLastError());
  size_t checked = n;
  switch (op) {
    case Op::kAllGather:
      NCCL_CHECK(ncclAllGather(send, recv, n, ncclInt32, comm, stream));
      checked = all;
      break;
    case Op::kAllReduce:
      NCCL_CHECK(ncclAllReduce(send, recv, n, ncclInt32, ncclSum, comm, stream));
      break;
    case Op::kReduceScatter:
      NCCL_CHECK(ncclReduceScatter(send, recv, n, ncclInt32, ncclSum, comm, stream));
      break;
    case Op::kReduce:
      NCCL_CHECK(ncclReduce(send, recv, n, ncclInt32, ncclSum, root, comm, stream));
      if (j.rank != root) checked = 0;
      break;
    case Op::kBroadcast:
      NCCL_CHECK(ncclBroadcast(send, recv, n, ncclInt32, root, comm, stream));
      if (j.rank != root) fill<<<64, 256, 0, stream>>>(send, n, root, j.round, 0);
      break;
    case Op::kAlltoAll:
      NCCL_CHECK(ncclAlltoAll(send, recv, n, ncclInt32, comm, stream));
      checked = all;
      break;
    case Op::kGather:
      NCCL_CHECK(ncclGather(send, recv, n, ncclInt32, root, comm, stream));
      checked = j.rank == root ? all : 0;
      break;
    case Op::kScatter:
      NCCL_CHECK(ncclScatter(send, recv, n, ncclInt32, root, comm, stream));
      break;
    case Op::kSendRecv:
      NCCL_CHECK(ncclGroupStart());
      NCCL_CHECK(ncclSend(send, n, ncclInt32, (j.rank + 1) % j.nranks, comm, stream));
      NCCL_CHECK(ncclRecv(recv, n, ncclInt32, (j.rank + j.nranks - 1) % j.nranks, comm, stream));
      NCCL_CHECK(ncclGroupEnd());
      break;
    default:
      break;
  }
  if (checked > 0) check<<<64, 256, 0, stream>>>(recv, checked, op, j, root, bad);
  CUDA_CHECK(cudaGetLastError());
}

ncclUniqueId shared_id(const std::string& path, int rank) {
  ncclUniqueId id{};
  if (rank == 0) {
    NCCL_CHECK(ncclGetUniqueId(&id));
    const std::string partial = path + ".partial";
    std::FILE* f = std::fopen(partial.c_str(), "wb");
    if (f == nullptr || std::fwrite(id.internal, sizeof id.internal, 1, f) != 1) std::exit(5);
    std::fclose(f);
    std::rename(partial.c_str(), path.c_str());
    return id;
  }
  for (int i = 0; i < 3000; ++i) {
    if (std::FILE* f = std::fopen(path.c_str(), "rb")) {
      const bool read = std::fread(id.internal, sizeof id.internal, 1, f) == 1;
      std::fclose(f);
      if (read) return id;
    }
    ::usleep(10000);
  }
  std::fprintf(stderr, "rank %d: no id file %s after 30 s\n", rank, path.c_str());
  std::exit(5);
}

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

}  // namespace

int main(int argc, char** argv) {
  std::string id_file, name = "ops", stop_file;
  int nranks = 2, rank = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], v = argv[i + 1];
    if (flag == "--id-file")
      id_file = v;
    else if (flag == "--nranks")
      nranks = std::atoi(v.c_str());
    else if (flag == "--rank")
      rank = std::atoi(v.c_str());
    else if (flag == "--case")
      name = v;
    else if (flag == "--stop-file")
      stop_file = v;
  }
  CUDA_CHECK(cudaSetDevice(0));
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const ncclUniqueId id = shared_id(id_file, rank);
  ncclComm_t comm;
  NCCL_CHECK(ncclCommInitRank(&comm, nranks, id, rank));
  const size_t n = (size_t{1} << 16) + 3;
  int *send, *recv;
  unsigned long long* bad;
  CUDA_CHECK(cudaMalloc(&send, n * nranks * sizeof(int)));
  CUDA_CHECK(cudaMalloc(&recv, n * nranks * sizeof(int)));
  CUDA_CHECK(cudaMalloc(&bad, sizeof(unsigned long long) * static_cast<int>(Op::kCount)));
  CUDA_CHECK(cudaMemset(bad, 0, sizeof(unsigned long long) * static_cast<int>(Op::kCount)));
  unsigned long long host_bad[static_cast<int>(Op::kCount)] = {};

  if (name == "abort") {
    // Rank 1 never joins the all-gather: rank 0's stream waits on it until the abort.
    if (rank == 0) {
      queue_op(Op::kAllGather, Job{nranks, rank, 0, n}, send, recv, comm, stream, bad);
      std::this_thread::sleep_for(std::chrono::seconds(1));
      const auto start = std::chrono::steady_clock::now();
      NCCL_CHECK(ncclCommAbort(comm));
      std::atomic<bool> done{false};
      std::thread watchdog([&] {
        for (int i = 0; i < 300 && !done; ++i)
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        if (!done) {
          std::printf(
              "nccl stream abort: FAILED, the stream still waits 30 s after ncclCommAbort\n");
          std::_Exit(6);
        }
      });
      CUDA_CHECK(cudaStreamSynchronize(stream));
      done = true;
      watchdog.join();
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
      std::printf("nccl stream abort: the stream went on %.1f ms after ncclCommAbort\n", ms);
      std::FILE* f = std::fopen((id_file + ".aborted").c_str(), "w");
      if (f) std::fclose(f);
    } else {
      for (int i = 0; i < 600 && !exists(id_file + ".aborted"); ++i) ::usleep(50000);
      ncclCommAbort(comm);
    }
    return 0;
  }

  if (name == "latency") {
    constexpr int kIterations = 300;
    constexpr size_t kBytes = 4096;
    char* host_send;
    char* host_recv;
    CUDA_CHECK(cudaMallocHost(&host_send, kBytes));
    CUDA_CHECK(cudaMallocHost(&host_recv, kBytes * nranks));
    auto median_us = [](std::vector<double>& v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    std::vector<double> call, total, host;
    for (int i = 0; i < kIterations; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      NCCL_CHECK(ncclAllGather(send, recv, kBytes, ncclChar, comm, stream));
      const auto t1 = std::chrono::steady_clock::now();
      CUDA_CHECK(cudaStreamSynchronize(stream));
      const auto t2 = std::chrono::steady_clock::now();
      call.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      total.push_back(std::chrono::duration<double, std::micro>(t2 - t0).count());
    }
    for (int i = 0; i < kIterations; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      NCCL_CHECK(ncclAllGather(host_send, host_recv, kBytes, ncclChar, comm, nullptr));
      host.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    NCCL_CHECK(ncclCommDestroy(comm));
    const char* mode = std::getenv("IRISD_NCCL_SHARED_GPU");
    if (rank == 0)
      std::printf(
          "nccl latency: %d ranks, IRISD_NCCL_SHARED_GPU=%s, 4 KiB all-gather, median of %d: "
          "device memory on a stream %.1f us (the call returned after %.1f us), host memory with "
          "a null stream %.1f us\n",
          nranks, mode ? mode : "(unset)", kIterations, median_us(total), median_us(call),
          median_us(host));
    return 0;
  }

  if (name == "loops") {
    long rounds = 0;
    for (int round = 0;
         rounds < 1000000 && !(rounds > 0 && !stop_file.empty() && exists(stop_file));
         ++round, ++rounds) {
      const Job j{nranks, rank, round % 1000, n};
      queue_op(Op::kAllReduce, j, send, recv, comm, stream, bad);
      queue_op(Op::kAllGather, j, send, recv, comm, stream, bad);
      CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    CUDA_CHECK(cudaMemcpy(host_bad, bad, sizeof host_bad, cudaMemcpyDeviceToHost));
    unsigned long long failures = 0;
    for (unsigned long long b : host_bad) failures += b;
    NCCL_CHECK(ncclCommDestroy(comm));
    if (rank == 0)
      std::printf(
          "nccl stream loops: %ld rounds of checked all-reduce and all-gather, %llu bad elements\n",
          rounds, failures);
    return failures == 0 ? 0 : 1;
  }

  for (int round = 0; round < 3; ++round)
    for (int op = 0; op < static_cast<int>(Op::kCount); ++op)
      queue_op(static_cast<Op>(op), Job{nranks, rank, round, n}, send, recv, comm, stream, bad);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CUDA_CHECK(cudaMemcpy(host_bad, bad, sizeof host_bad, cudaMemcpyDeviceToHost));
  unsigned long long failures = 0;
  for (int op = 0; op < static_cast<int>(Op::kCount); ++op) {
    if (host_bad[op] != 0)
      std::printf("rank %d: %s: %llu bad elements\n", rank, kOpNames[op], host_bad[op]);
    failures += host_bad[op];
  }
  NCCL_CHECK(ncclCommDestroy(comm));
  if (rank == 0)
    std::printf(
        "nccl stream ops: %d ranks, every operation x 3 rounds of %zu-element blocks, "
        "kernels before and after on the stream: %s\n",
        nranks, n, failures == 0 ? "all elements right" : "MISMATCHES");
  return failures == 0 ? 0 : 1;
}
