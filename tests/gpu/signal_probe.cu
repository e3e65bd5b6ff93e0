// iris-gpu-signal-probe: a benchmark (not a test) of the two ways irisd can order a stream-ordered
// collective on the caller's stream (issue 3, "measure both"). Two processes share one GPU, as a
// rank and irisd do: the "caller" enqueues on its stream a ready-flag write and a wait on a done
// flag; the "daemon" copies 4 KiB between the caller's IPC-imported buffers and writes the done
// flag, either
//   cpu-*: from its CPU: it polls the ready flag in host memory, issues the copy and a retire
//          counter write on its copy stream, polls that counter, then writes the done flag
//          (this is what irisd does today), or
//   gpu-*: from its own stream: cuStreamWaitValue32 on the ready flag, the copy, then
//          cuStreamWriteValue32 of the done flag, enqueued as soon as the request is seen,
// with the done flag in the caller's GPU memory (*-devflag) or in shared host memory
// (*-hostflag). "blocking" is the host-blocking reference: the caller's CPU writes the ready flag
// and spins on the host done flag, with events recorded on its stream around the call;
// "blocking-idle" is the same with no GPU work at all in the caller's process.
//
// --copy d2h copies into the daemon's pinned host memory (copy engine) instead of the caller's
// GPU buffer (same-GPU, run on SMs by this driver): it tells whether the context switch is
// paid for SM work only.
//
// Modes: "single" synchronises the caller's stream after every call (a stream that waits from
// idle); "burst" enqueues 10 calls back to back and reports the time per call. Times come from
// events on the caller's stream (host clock for "blocking"). Prints a markdown table.
#include <cuda.h>
#include <cuda_runtime.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "tests/gpu/cuda_check.cuh"

namespace {

enum class Variant : uint32_t {
  kBlockingIdle,
  kBlocking,
  kCpuDevFlag,
  kCpuHostFlag,
  kGpuDevFlag,
  kGpuHostFlag
};
constexpr const char* kVariantNames[] = {"blocking-idle", "blocking",    "cpu-devflag",
                                         "cpu-hostflag",  "gpu-devflag", "gpu-hostflag"};
constexpr uint64_t kCopyBytes = 4096;
constexpr uint32_t kBurst = 10;

// The page both processes map; each word on its own cache line.
struct alignas(64) Line {
  std::atomic<uint32_t> value;
};
struct Shared {
  Line ready;      // caller's stream (or CPU) -> daemon
  Line done_host;  // daemon -> caller, host-memory variants
  Line submitted;  // caller's CPU -> daemon: requests posted so far (the ring)
  Line retired;    // daemon's copy stream -> daemon's CPU
  Line variant;    // of the requests posted next
  Line handles_ready;
  Line quit;
  cudaIpcMemHandle_t src, dst, done_dev;
};

bool reached(uint32_t value, uint32_t generation) {
  return static_cast<int32_t>(value - generation) >= 0;
}

void spin_until(const std::atomic<uint32_t>& word, uint32_t generation) {
  while (!reached(word.load(std::memory_order_acquire), generation)) {
  }
}

CUdeviceptr device_view(void* host) {
  CUdeviceptr p = 0;
  CU_CHECK(cuMemHostGetDevicePointer(&p, host, 0));
  return p;
}

int run_daemon(Shared* sh, bool to_host) {
  CUDA_CHECK(cudaSetDevice(0));
  CU_CHECK(cuMemHostRegister(sh, sizeof(Shared),
                             CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP));
  while (sh->handles_ready.value.load(std::memory_order_acquire) == 0) usleep(100);
  void *src = nullptr, *dst = nullptr, *done_dev = nullptr;
  CUDA_CHECK(cudaIpcOpenMemHandle(&src, sh->src, cudaIpcMemLazyEnablePeerAccess));
  CUDA_CHECK(cudaIpcOpenMemHandle(&dst, sh->dst, cudaIpcMemLazyEnablePeerAccess));
  CUDA_CHECK(cudaIpcOpenMemHandle(&done_dev, sh->done_dev, cudaIpcMemLazyEnablePeerAccess));
  CUstream copy = nullptr, signal = nullptr;
  CU_CHECK(cuStreamCreate(&copy, CU_STREAM_NON_BLOCKING));
  CU_CHECK(cuStreamCreate(&signal, CU_STREAM_NON_BLOCKING));
  const CUdeviceptr ready = device_view(&sh->ready.value);
  const CUdeviceptr retired = device_view(&sh->retired.value);
  const CUdeviceptr done_host = device_view(&sh->done_host.value);
  const auto d_src = reinterpret_cast<CUdeviceptr>(src);
  // --copy d2h: into pinned host memory of the daemon (a copy-engine transfer) instead of the
  // caller's GPU buffer (a same-GPU copy, which this driver runs on SMs).
  void* host_dst = nullptr;
  if (to_host) CUDA_CHECK(cudaHostAlloc(&host_dst, kCopyBytes, cudaHostAllocMapped));
  const auto d_dst = to_host ? device_view(host_dst) : reinterpret_cast<CUdeviceptr>(dst);
  const auto d_done = reinterpret_cast<CUdeviceptr>(done_dev);
  for (uint32_t g = 1;; ++g) {
    while (!reached(sh->submitted.value.load(std::memory_order_acquire), g))
      if (sh->quit.value.load(std::memory_order_acquire) != 0) {
        CU_CHECK(cuStreamSynchronize(copy));
        CU_CHECK(cuStreamSynchronize(signal));
        return 0;
      }
    const auto variant = static_cast<Variant>(sh->variant.value.load(std::memory_order_acquire));
    switch (variant) {
      case Variant::kBlockingIdle:
      case Variant::kBlocking:
      case Variant::kCpuDevFlag:
      case Variant::kCpuHostFlag:
        spin_until(sh->ready.value, g);
        CU_CHECK(cuMemcpyAsync(d_dst, d_src, kCopyBytes, copy));
        CU_CHECK(cuStreamWriteValue32(copy, retired, g, CU_STREAM_WRITE_VALUE_DEFAULT));
        spin_until(sh->retired.value, g);
        if (variant == Variant::kCpuDevFlag)
          CU_CHECK(cuStreamWriteValue32(signal, d_done, g, CU_STREAM_WRITE_VALUE_DEFAULT));
        else
          sh->done_host.value.store(g, std::memory_order_release);
        break;
      case Variant::kGpuDevFlag:
      case Variant::kGpuHostFlag:
        CU_CHECK(cuStreamWaitValue32(copy, ready, g, CU_STREAM_WAIT_VALUE_GEQ));
        CU_CHECK(cuMemcpyAsync(d_dst, d_src, kCopyBytes, copy));
        CU_CHECK(cuStreamWriteValue32(copy, variant == Variant::kGpuDevFlag ? d_done : done_host, g,
                                      CU_STREAM_WRITE_VALUE_DEFAULT));
        break;
    }
  }
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * v.size()))];
}

int run_caller(Shared* sh, uint32_t iterations) {
  CUDA_CHECK(cudaSetDevice(0));
  CU_CHECK(cuMemHostRegister(sh, sizeof(Shared),
                             CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP));
  void *src = nullptr, *dst = nullptr, *done_dev = nullptr;
  CUDA_CHECK(cudaMalloc(&src, 2 << 20));
  CUDA_CHECK(cudaMalloc(&dst, 2 << 20));
  CUDA_CHECK(cudaMalloc(&done_dev, 2 << 20));
  CUDA_CHECK(cudaMemset(done_dev, 0, 4));
  CUDA_CHECK(cudaIpcGetMemHandle(&sh->src, src));
  CUDA_CHECK(cudaIpcGetMemHandle(&sh->dst, dst));
  CUDA_CHECK(cudaIpcGetMemHandle(&sh->done_dev, done_dev));
  sh->handles_ready.value.store(1, std::memory_order_release);
  CUstream stream = nullptr;
  CU_CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  cudaEvent_t start, end;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&end));
  const CUdeviceptr ready = device_view(&sh->ready.value);
  const CUdeviceptr done_host = device_view(&sh->done_host.value);
  const auto d_done = reinterpret_cast<CUdeviceptr>(done_dev);
  uint32_t g = 0;

  std::printf(
      "| variant | mode | p50 us per call | p99 us per call |\n| --- | --- | ---: | ---: |\n");
  for (uint32_t v = 0; v < std::size(kVariantNames); ++v) {
    const auto variant = static_cast<Variant>(v);
    sh->variant.value.store(v, std::memory_order_release);
    const CUdeviceptr done =
        variant == Variant::kCpuDevFlag || variant == Variant::kGpuDevFlag ? d_done : done_host;
    const bool host_only = variant == Variant::kBlockingIdle || variant == Variant::kBlocking;
    for (const uint32_t per_sample : {1u, kBurst}) {
      if (host_only && per_sample != 1) continue;
      std::vector<double> us;
      for (uint32_t i = 0; i < iterations / per_sample + 10; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        if (variant != Variant::kBlockingIdle)
          CUDA_CHECK(cudaEventRecord(start, reinterpret_cast<cudaStream_t>(stream)));
        for (uint32_t k = 0; k < per_sample; ++k) {
          ++g;
          if (host_only) {
            sh->ready.value.store(g, std::memory_order_release);
            sh->submitted.value.store(g, std::memory_order_release);
            spin_until(sh->done_host.value, g);
            continue;
          }
          // As libiris does: the flag operations are enqueued, then the request is posted.
          CU_CHECK(cuStreamWriteValue32(stream, ready, g, CU_STREAM_WRITE_VALUE_DEFAULT));
          CU_CHECK(cuStreamWaitValue32(stream, done, g, CU_STREAM_WAIT_VALUE_GEQ));
          sh->submitted.value.store(g, std::memory_order_release);
        }
        float ms = 0;
        if (variant != Variant::kBlockingIdle) {
          CUDA_CHECK(cudaEventRecord(end, reinterpret_cast<cudaStream_t>(stream)));
          CUDA_CHECK(cudaEventSynchronize(end));
          CUDA_CHECK(cudaEventElapsedTime(&ms, start, end));
        }
        const auto t1 = std::chrono::steady_clock::now();
        const double sample =
            host_only ? std::chrono::duration<double, std::micro>(t1 - t0).count() : ms * 1000.0;
        if (i >= 10) us.push_back(sample / per_sample);  // the first 10 warm up
      }
      std::printf("| %s | %s | %.1f | %.1f |\n", kVariantNames[v],
                  per_sample == 1 ? "single" : "burst of 10", percentile(us, 0.5),
                  percentile(us, 0.99));
      std::fflush(stdout);
    }
  }
  sh->quit.value.store(1, std::memory_order_release);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  uint32_t iterations = 1000;
  bool to_host = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--iterations") == 0) {
      iterations = static_cast<uint32_t>(std::strtoul(argv[i + 1], nullptr, 10));
    } else if (std::strcmp(argv[i], "--copy") == 0 &&
               (std::strcmp(argv[i + 1], "d2d") == 0 || std::strcmp(argv[i + 1], "d2h") == 0)) {
      to_host = std::strcmp(argv[i + 1], "d2h") == 0;
    } else {
      std::fprintf(stderr, "usage: %s [--iterations N] [--copy d2d|d2h]\n", argv[0]);
      return 1;
    }
  }
  if (iterations < kBurst) {
    std::fprintf(stderr, "--iterations must be at least %u\n", kBurst);
    return 1;
  }
  // Both processes map this page before either touches CUDA (fork after CUDA init is undefined).
  void* page =
      mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) {
    std::perror("mmap");
    return 1;
  }
  auto* sh = new (page) Shared{};
  const pid_t daemon = fork();
  if (daemon < 0) {
    std::perror("fork");
    return 1;
  }
  if (daemon == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive a caller that exited on an error
    _exit(run_daemon(sh, to_host));
  }
  const int rc = run_caller(sh, iterations);
  int status = 0;
  waitpid(daemon, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "daemon process failed (status %d)\n", status);
    return 1;
  }
  return rc;
}
