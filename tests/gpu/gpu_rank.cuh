// iris-gpu-rank's parts (gpu_rank.cu: the all-gather and collective modes, gpu_rank_graph.cu: CUDA
// graphs and outliving irisd): its options and the helpers both use.
#pragma once

#include <cstdint>
#include <string>

#include "iris/iris.hpp"

namespace iris::gpu_rank {

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

constexpr int kBlocks = 1024, kThreads = 256;

iris::Client connect(const Options& o);
// GPU memory for a test buffer: cudaMalloc, or VMM allocations (three, back to back).
uint8_t* gpu_alloc(const Options& o, uint64_t bytes);
// Graph mode (gpu_rank_graph.cu).
int run_graph(const Options& o);
// irisd dies while this rank's streams wait on it (gpu_rank_graph.cu).
int run_outlive_daemon(const Options& o);

}  // namespace iris::gpu_rank
