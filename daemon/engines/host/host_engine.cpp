#include "daemon/engines/host/host_engine.hpp"

#include <sched.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "iris/shared/cpu_relax.hpp"

namespace iris::daemon {

namespace {
// How long an idle worker polls the queue before it sleeps: longer than the gaps between a
// collective's arrivals and between back-to-back collectives (microseconds), short enough that
// an idle irisd's workers go quiet at once. Past the first 2 us each turn yields the core, so
// that ranks sharing it run.
constexpr auto kWorkerSpin = std::chrono::microseconds(50);
constexpr auto kPureSpin = std::chrono::microseconds(2);
// Latency chunks taken in a row before a waiting bulk chunk gets its turn: a tenant's stream of
// small collectives never stops another's transfer (CopyDispatcher's FairShare does the same
// for slices, with a bound per class, which alone would not keep latency off every worker).
constexpr uint32_t kLatencyRun = 8;
}  // namespace

struct HostEngine::Job {
  uint64_t cookie;
  uint64_t bytes;
  std::atomic<uint64_t> chunks_left;
  std::atomic<uint64_t> engine_ns;  // the workers' memcpy time, summed over the chunks
};

HostEngine::HostEngine(const EngineOptions& options, std::string reason)
    : Engine(options.inline_bytes, std::max<uint32_t>(options.workers, 1)),
      options_(options),
      event_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  if (!event_fd_) throw std::runtime_error(std::string("eventfd: ") + std::strerror(errno));
  if (options_.workers == 0) options_.workers = 1;
  if (options_.chunk_bytes == 0) options_.chunk_bytes = 1 << 20;
  description_.name = "host";
  description_.reason = std::move(reason);
  description_.copy_method = "memcpy on worker threads (large copies in chunks)";
  DeviceDescription host{"host memory", "", 0, {}, {}, {}};
  for (uint32_t i = 0; i < options_.workers; ++i)
    host.engines.push_back({"host-worker-" + std::to_string(i), i});
  description_.devices.push_back(std::move(host));
  for (uint32_t i = 0; i < options_.workers; ++i) workers_.emplace_back([this] { worker_main(); });
}

HostEngine::~HostEngine() {
  stop();
  for (const auto* queue : {&latency_queue_, &queue_})
    for (const Chunk& c : *queue) finish_chunk(c.job);
}

void HostEngine::stop() {
  {
    std::lock_guard lock(queue_mutex_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
  // A worker ends the chunk it copies and takes no other: then none writes anywhere.
  for (auto& w : workers_)
    if (w.joinable()) w.join();
}

void HostEngine::submit(std::span<const CopyRequest> copies) {
  std::size_t queued = 0;
  {
    std::lock_guard lock(queue_mutex_);
    for (const CopyRequest& copy : copies) {
      // At least one chunk: a copy of nothing must still complete.
      const uint64_t chunks =
          std::max<uint64_t>(1, (copy.bytes + options_.chunk_bytes - 1) / options_.chunk_bytes);
      Job* job = take_job();
      job->cookie = copy.cookie;
      job->bytes = copy.bytes;
      job->chunks_left.store(chunks, std::memory_order_relaxed);
      job->engine_ns.store(0, std::memory_order_relaxed);
      auto& queue = copy.queue == EngineQueue::kLatency ? latency_queue_ : queue_;
      for (uint64_t i = 0; i < chunks; ++i) {
        const uint64_t offset = i * options_.chunk_bytes;
        const uint64_t n = std::min(options_.chunk_bytes, copy.bytes - offset);
        queue.push_back({job, copy.src + offset, copy.dst + offset, n});
      }
      queued += chunks;
    }
    queued_.store(latency_queue_.size() + queue_.size(), std::memory_order_release);
    // Spinning workers find the chunks themselves; only sleeping ones cost a wake-up.
    if (sleepers_ == 0) queued = 0;
  }
  if (queued == 1) {
    queue_cv_.notify_one();
  } else if (queued > 1) {
    queue_cv_.notify_all();
  }
}

std::optional<HostEngine::Chunk> HostEngine::next_chunk() {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const auto idle = std::chrono::steady_clock::now() - start;
    const bool spun_out = idle >= kWorkerSpin;
    // The spin reads only the count: the progress thread's submit() never waits behind it.
    if (queued_.load(std::memory_order_acquire) == 0 && !spun_out) {
      if (idle < kPureSpin) {
        cpu_relax();
      } else {
        sched_yield();
      }
      continue;
    }
    std::unique_lock lock(queue_mutex_);
    if (spun_out) {
      ++sleepers_;
      queue_cv_.wait(lock,
                     [this] { return stopping_ || !latency_queue_.empty() || !queue_.empty(); });
      --sleepers_;
    }
    if (stopping_) return std::nullopt;
    const bool bulk_turn = latency_run_ >= kLatencyRun && !queue_.empty();
    auto& queue = latency_queue_.empty() || bulk_turn ? queue_ : latency_queue_;
    if (queue.empty()) continue;  // another worker took it
    latency_run_ = &queue == &latency_queue_ ? std::min(latency_run_ + 1, kLatencyRun) : 0;
    Chunk chunk = queue.front();
    queue.pop_front();
    queued_.store(latency_queue_.size() + queue_.size(), std::memory_order_relaxed);
    return chunk;
  }
}

void HostEngine::worker_main() {
  // Below the progress thread: on a busy CPU a bulk memcpy must not hold the core that would
  // hand the next tenant's small collective over (nice 10; raising one's own nice needs no
  // privilege, and a failure only leaves the worker at the default).
  ::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), kWorkerNice);
  while (std::optional<Chunk> chunk = next_chunk()) {
    const auto start = std::chrono::steady_clock::now();
    std::memcpy(chunk->dst, chunk->src, chunk->bytes);
    const auto took = std::chrono::steady_clock::now() - start;
    chunk->job->engine_ns.fetch_add(
        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(took).count()),
        std::memory_order_relaxed);
    finish_chunk(chunk->job);
  }
}

void HostEngine::finish_chunk(Job* job) {
  if (job->chunks_left.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  {
    std::lock_guard lock(done_mutex_);
    done_.push_back({job->cookie, ErrorCode::kOk, TransferPath::kComputeUnits, job->bytes,
                     std::max<uint64_t>(job->engine_ns.load(std::memory_order_relaxed), 1)});
    finished_jobs_.push_back(job);
  }
  // Stored, then the loop's flag loaded, both sequentially consistent; arm_completion_wakeup()
  // does the reverse: one of the two sees the other, so no completion is slept through.
  done_pending_.store(true, std::memory_order_seq_cst);
  if (!loop_asleep_.load(std::memory_order_seq_cst)) return;
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t r = ::write(event_fd_.get(), &one, sizeof(one));
}

bool HostEngine::arm_completion_wakeup() {
  loop_asleep_.store(true, std::memory_order_seq_cst);
  return !done_pending_.load(std::memory_order_seq_cst);
}

void HostEngine::disarm_completion_wakeup() {
  loop_asleep_.store(false, std::memory_order_relaxed);
}

std::size_t HostEngine::poll(std::vector<CopyCompletion>& out) {
  const std::size_t before = out.size();
  if (done_pending_.exchange(false, std::memory_order_acquire)) {
    std::lock_guard lock(done_mutex_);
    out.insert(out.end(), done_.begin(), done_.end());
    done_.clear();
    spare_jobs_.insert(spare_jobs_.end(), finished_jobs_.begin(), finished_jobs_.end());
    finished_jobs_.clear();
  }
  return out.size() - before;
}

HostEngine::Job* HostEngine::take_job() {
  if (spare_jobs_.empty()) {
    jobs_.push_back(std::make_unique<Job>());
    return jobs_.back().get();
  }
  Job* job = spare_jobs_.back();
  spare_jobs_.pop_back();
  return job;
}

}  // namespace iris::daemon
