// Host engine: worker threads that memcpy between shared-memory buffers. Each worker stands for
// one copy engine. Large copies are cut into chunks that all workers share; a worker takes the
// chunks of latency copies (EngineQueue::kLatency, marked while tenants share the node) before any
// other, so that a tenant's small collective waits for the chunks being copied, not for the bulk
// queued ahead of it (serves_latency_first); after a run of them a waiting bulk chunk goes, so
// that latency work never stops a transfer. Small ones, up to
// `inline_bytes` of a submission, the caller copies itself with copy_now(): waking a worker and
// retiring its completion would cost more than the copy. Workers spin briefly before they sleep,
// and announce completions on the eventfd only while the progress loop sleeps: a collective's
// large arrivals come microseconds apart, and a wake-up or an eventfd write per copy cost more
// than the spin.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "daemon/engines/engine.hpp"
#include "iris/shared/unix_socket.hpp"

namespace iris::daemon {

class HostEngine final : public Engine {
 public:
  HostEngine(const EngineOptions& options, std::string reason);
  ~HostEngine() override;

  // The workers' nice value: below the progress thread (worker_main says why).
  static constexpr int kWorkerNice = 10;

  const EngineDescription& description() const override { return description_; }
  void submit(std::span<const CopyRequest> copies) override;
  void stop() override;
  std::size_t poll(std::vector<CopyCompletion>& out) override;
  int completion_fd() const override { return event_fd_.get(); }
  bool arm_completion_wakeup() override;
  void disarm_completion_wakeup() override;
  bool serves_latency_first() const override { return true; }

 private:
  struct Job;
  struct Chunk {
    Job* job;
    const std::byte* src;
    std::byte* dst;
    uint64_t bytes;
  };

  void worker_main();
  // The next chunk to copy, after a brief spin and then a sleep while there is none; nullopt
  // once the engine stops.
  std::optional<Chunk> next_chunk();
  void finish_chunk(Job* job);
  // A job record from those finished (poll() hands them back), else a new one: steady traffic
  // allocates nothing. The progress thread's.
  Job* take_job();

  EngineDescription description_;
  EngineOptions options_;
  net::Fd event_fd_;

  std::mutex queue_mutex_;
  std::condition_variable queue_cv_;
  // Taken before queue_, but that after kLatencyRun latency chunks in a row a waiting bulk chunk
  // goes.
  std::deque<Chunk> latency_queue_;
  uint32_t latency_run_ = 0;  // latency chunks taken in a row, up to kLatencyRun
  std::deque<Chunk> queue_;
  // Both queues' chunks, for spinning workers to read unlocked.
  std::atomic<std::size_t> queued_{0};
  uint32_t sleepers_ = 0;  // workers waiting on queue_cv_ (under queue_mutex_)
  bool stopping_ = false;

  std::mutex done_mutex_;
  std::vector<CopyCompletion> done_;
  std::vector<Job*> finished_jobs_;        // under done_mutex_, until poll() takes them back
  std::atomic<bool> done_pending_{false};  // lets poll() skip the lock while nothing finished
  std::atomic<bool> loop_asleep_{false};   // the eventfd must announce completions

  // Every job record made (owned here, reused), and those free to take; the progress thread's.
  std::vector<std::unique_ptr<Job>> jobs_;
  std::vector<Job*> spare_jobs_;

  std::vector<std::thread> workers_;
};

}  // namespace iris::daemon
