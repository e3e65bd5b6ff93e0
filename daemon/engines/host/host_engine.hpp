// Host engine: worker threads that memcpy between shared-memory buffers. Each worker stands for
// one copy engine. Large copies are cut into chunks that all workers share. Small ones, up to
// `inline_bytes` of a submission, the caller copies itself with copy_now(): waking a worker and
// retiring its completion would cost more than the copy.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "daemon/engines/engine.hpp"
#include "iris/shared/unix_socket.hpp"

namespace iris::daemon {

class HostEngine final : public Engine {
 public:
  HostEngine(const EngineOptions& options, std::string reason);
  ~HostEngine() override;

  const EngineDescription& description() const override { return description_; }
  void submit(std::span<const CopyRequest> copies) override;
  std::size_t poll(std::vector<CopyCompletion>& out) override;
  int completion_fd() const override { return event_fd_.get(); }

 private:
  struct Job;
  struct Chunk {
    Job* job;
    const std::byte* src;
    std::byte* dst;
    uint64_t bytes;
  };

  void worker_main();
  void finish_chunk(Job* job);

  EngineDescription description_;
  EngineOptions options_;
  net::Fd event_fd_;

  std::mutex queue_mutex_;
  std::condition_variable queue_cv_;
  std::deque<Chunk> queue_;
  bool stopping_ = false;

  std::mutex done_mutex_;
  std::vector<CopyCompletion> done_;
  std::atomic<bool> done_pending_{false};  // lets poll() skip the lock while nothing finished

  std::vector<std::thread> workers_;
};

}  // namespace iris::daemon
