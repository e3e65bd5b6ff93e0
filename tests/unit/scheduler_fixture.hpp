// The fixture of the scheduler's unit tests: a scheduler on the real host engine, 3 ranks with
// plain process memory, and what each rank was told. Shared by collective_scheduler_test.cpp and
// collective_scheduler_failures_test.cpp.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "daemon/collectives/collective_scheduler.hpp"
#include "daemon/engines/host/host_engine.hpp"
#include "daemon/operations/health.hpp"

namespace iris::daemon::testing {

// A communicator of `nranks` local ranks, rank r's session being r.
inline Communicator test_communicator(uint32_t nranks) {
  Communicator comm;
  comm.id = 1;
  comm.key = "k";
  comm.nranks = nranks;
  comm.next_seq.assign(nranks, 1);
  for (uint32_t r = 0; r < nranks; ++r) comm.members.emplace_back(r);
  return comm;
}

class Scheduler : public ::testing::Test {
 protected:
  static constexpr uint32_t kRanks = 3;

  void SetUp() override {
    EngineOptions options;
    options.workers = 2;
    options.inline_bytes = 16;  // small, so that both the inline and the worker path run
    options.chunk_bytes = 4096;
    engine = std::make_unique<HostEngine>(options, "test");
    schedule_on(*engine);
    comm = test_communicator(kRanks);
    for (uint32_t r = 0; r < kRanks; ++r) {
      send.emplace_back(1 << 16);
      recv.emplace_back(kRanks << 16, std::byte{0xEE});
    }
  }

  // A scheduler over `e`, paced as `pacing` says, that records each rank's completion code and
  // reason.
  void schedule_on(Engine& e, Pacing pacing = {}) {
    scheduler.reset();
    copies = std::make_unique<CopyDispatcher>(e, stats, pacing);
    scheduler = std::make_unique<CollectiveScheduler>(
        *copies, stats, log,
        [this](const CompletionTarget& t, ErrorCode c, const std::string& why) {
          completions[t.session_id] = c;
          reasons[t.session_id] = why;
        },
        8);
  }

  // Rank `rank`'s all-gather of `bytes` from the start of its send buffer into its receive buffer.
  ValidatedRequest plan(uint32_t rank, uint64_t bytes) {
    for (uint64_t i = 0; i < bytes; ++i) send[rank][i] = std::byte(rank * 37 + i);
    ValidatedRequest p{};
    p.send = std::make_shared<MappedBuffer>(
        MappedBuffer{2 * rank, rank, send[rank].data(), send[rank].size(), nullptr});
    p.recv = std::make_shared<MappedBuffer>(
        MappedBuffer{2 * rank + 1, rank, recv[rank].data(), recv[rank].size(), nullptr});
    p.args.kind = CollectiveKind::kAllGather;
    p.args.bytes = bytes;
    return p;
  }

  void arrive(uint32_t rank, uint64_t seq, uint64_t bytes) {
    scheduler->arrive(comm, rank, seq, {rank, 0, 1}, plan(rank, bytes));
  }

  bool copies_in_flight() const {
    for (const auto& [seq, c] : comm.in_flight)
      if (c.total_in_flight != 0) return true;
    return false;
  }

  // Drives engine completions until `n` ranks have completed and no copy is in flight (or 10 s
  // pass, which fails the test's expectations).
  void drain_until(std::size_t n) {
    std::vector<CopyCompletion> done;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while ((completions.size() < n || copies_in_flight()) &&
           std::chrono::steady_clock::now() < deadline) {
      done.clear();
      engine->poll(done);
      for (const auto& c : done) copies->complete(c);
      if (done.empty()) std::this_thread::yield();
    }
  }

  // Runs every copy a stepped engine holds, in order, and feeds the completions back.
  template <typename SteppedEngine>
  void run_all(SteppedEngine& stepped) {
    while (!stepped.queued.empty()) {
      stepped.run(0);
      std::vector<CopyCompletion> done;
      stepped.poll(done);
      for (const auto& c : done) copies->complete(c);
    }
  }

  // Every rank completed well (else its reason is shown) and holds every rank's block.
  void expect_every_rank_gathered(uint64_t bytes) {
    ASSERT_EQ(completions.size(), kRanks);
    for (uint32_t r = 0; r < kRanks; ++r) {
      EXPECT_EQ(completions[r], ErrorCode::kOk) << reasons[r];
      expect_gathered(r, bytes);
    }
  }

  void expect_gathered(uint32_t rank, uint64_t bytes) {
    for (uint32_t src = 0; src < kRanks; ++src)
      for (uint64_t i = 0; i < bytes; ++i)
        ASSERT_EQ(recv[rank][src * bytes + i], std::byte(src * 37 + i))
            << "rank " << rank << " block " << src << " byte " << i;
  }

  Stats stats;
  TenantLog log{stats.log_lines_suppressed_total};
  std::unique_ptr<HostEngine> engine;
  std::unique_ptr<CopyDispatcher> copies;
  std::unique_ptr<CollectiveScheduler> scheduler;
  Communicator comm;
  std::vector<std::vector<std::byte>> send, recv;
  std::map<uint64_t, ErrorCode> completions;  // by rank (session id = rank here)
  std::map<uint64_t, std::string> reasons;    // why, for failures
};

// An engine that copies only when told to, one copy at a time, in an order the test picks: the
// threaded host engine cannot show a completion order deterministically.
class SteppedEngine final : public Engine {
 public:
  // `copy_now_budget`: bytes of a submission's copies between host memory done at once;
  // `helpers`: the threads said to share a larger submission.
  explicit SteppedEngine(uint64_t copy_now_budget = 0, uint32_t helpers = 1)
      : Engine(copy_now_budget, helpers) {}
  const EngineDescription& description() const override { return description_; }
  void stop() override {}  // its copies run only when a test steps them
  void submit(std::span<const CopyRequest> copies) override {
    queued.insert(queued.end(), copies.begin(), copies.end());
  }
  std::size_t poll(std::vector<CopyCompletion>& out) override {
    out.insert(out.end(), finished.begin(), finished.end());
    const std::size_t n = finished.size();
    finished.clear();
    return n;
  }
  int completion_fd() const override { return -1; }
  // Runs the queued copy at `index` (really copying) and reports it on the next poll.
  void run(std::size_t index) {
    const CopyRequest c = queued[index];
    std::memcpy(c.dst, c.src, c.bytes);
    finished.push_back({c.cookie, ErrorCode::kOk, TransferPath::kComputeUnits, c.bytes});
    queued.erase(queued.begin() + static_cast<std::ptrdiff_t>(index));
  }
  // Reports the queued copy at `index` failed, as an engine whose DMA broke does.
  void fail(std::size_t index) {
    finished.push_back(
        {queued[index].cookie, ErrorCode::kEngineError, TransferPath::kCopyEngine, 0});
    queued.erase(queued.begin() + static_cast<std::ptrdiff_t>(index));
  }
  std::vector<CopyRequest> queued;
  std::vector<CopyCompletion> finished;

 private:
  EngineDescription description_{"stepped", "test", {}, "", "", ""};
};

}  // namespace iris::daemon::testing
