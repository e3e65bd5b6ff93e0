// iris-gpu-spin-proof: shows which engine moved an all-gather's bytes, without a profiler.
// A kernel fills every SM with arithmetic for about 50 ms; an all-gather issued
// while it runs finishes before the kernel ends only if something other than the busy SMs moved
// its bytes (the copy engines); the time against the unloaded copy says how much it was slowed.
// One rank; send is GPU memory; the receive buffer is pinned host memory (device to host: copy
// engine) or GPU memory on the same GPU (device to device: SMs under driver 580 / CUDA 13.0).
//   iris-gpu-spin-proof --socket S [--bytes N]
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "iris/iris.hpp"
#include "tests/gpu/cuda_check.cuh"


__global__ void spin_kernel(long long cycles, float* sink) {
  const long long start = clock64();
  float x = threadIdx.x;
  while (clock64() - start < cycles) x = x * 1.0000001f + 0.5f;
  if (x == -1.0f) *sink = x;  // never true: keeps the arithmetic
}

int main(int argc, char** argv) {
  std::string socket;
  size_t bytes = 256ull << 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--socket") socket = argv[i + 1];
    if (a == "--bytes") bytes = std::stoull(argv[i + 1]);
  }
  CUDA_CHECK(cudaSetDevice(0));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  int blocks_per_sm = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, spin_kernel, 1024, 0));
  const int grid = prop.multiProcessorCount * blocks_per_sm;
  float* sink = nullptr;
  CUDA_CHECK(cudaMalloc(&sink, sizeof(float)));
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t begin, end;
  CUDA_CHECK(cudaEventCreate(&begin));
  CUDA_CHECK(cudaEventCreate(&end));

  // Calibrate to about 50 ms.
  long long cycles = 10'000'000;
  for (int round = 0; round < 3; ++round) {
    CUDA_CHECK(cudaEventRecord(begin, stream));
    spin_kernel<<<grid, 1024, 0, stream>>>(cycles, sink);
    CUDA_CHECK(cudaEventRecord(end, stream));
    CUDA_CHECK(cudaEventSynchronize(end));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, begin, end));
    cycles = static_cast<long long>(cycles * (50.0 / ms));
  }

  iris::ClientOptions options;
  options.socket_path = socket;
  options.client_name = "spin-proof";
  auto client = iris::Client::connect(options);
  auto comm = iris::Communicator::init(client, "spin-proof", 1, 0);
  void* send_dev = nullptr;
  void* recv_dev = nullptr;
  CUDA_CHECK(cudaMalloc(&send_dev, bytes));
  CUDA_CHECK(cudaMalloc(&recv_dev, bytes));
  CUDA_CHECK(cudaMemset(send_dev, 7, bytes));
  auto send = client.register_cuda_buffer(send_dev, bytes);
  auto recv_dev_buffer = client.register_cuda_buffer(recv_dev, bytes);
  auto recv_host = client.allocate(bytes);

  std::printf("%-28s %12s %12s %10s  %s\n", "receive buffer", "alone ms", "under SMs ms",
              "kernel ms", "verdict");
  for (const bool to_host : {true, false}) {
    void* recv = to_host ? recv_host.data() : recv_dev;
    comm.all_gather(send_dev, recv, bytes).wait();  // warm: imports, pinning, streams
    auto t0 = std::chrono::steady_clock::now();
    comm.all_gather(send_dev, recv, bytes).wait();
    const double alone_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

    CUDA_CHECK(cudaEventRecord(begin, stream));
    spin_kernel<<<grid, 1024, 0, stream>>>(cycles, sink);
    CUDA_CHECK(cudaEventRecord(end, stream));
    t0 = std::chrono::steady_clock::now();
    comm.all_gather(send_dev, recv, bytes).wait();
    const double under_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const bool kernel_still_running = cudaEventQuery(end) == cudaErrorNotReady;
    CUDA_CHECK(cudaEventSynchronize(end));
    float kernel_ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&kernel_ms, begin, end));
    std::printf("%-28s %12.2f %12.2f %10.2f  %s\n",
                to_host ? "pinned host (D2H)" : "same GPU (D2D)", alone_ms, under_ms, kernel_ms,
                kernel_still_running ? "finished while the kernel ran"
                                     : "waited for the kernel");
  }
  return 0;
}
