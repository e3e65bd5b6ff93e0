// The scheduler against the real host engine, on plain process memory: matching by
// (communicator, seq), copies started as soon as two ranks are there, completion only when every
// block has landed, and failures that reach every rank.
#include "daemon/collectives/collective_scheduler.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <thread>
#include <tuple>

#include "daemon/engines/host/host_engine.hpp"
#include "daemon/operations/health.hpp"

namespace iris::daemon {
namespace {

// A communicator of `nranks` local ranks, rank r's session being r.
Communicator test_communicator(uint32_t nranks) {
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

  // A scheduler over `e` that records each rank's completion code and reason.
  void schedule_on(Engine& e) {
    scheduler = std::make_unique<CollectiveScheduler>(
        e, stats, log,
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
      for (const auto& c : done) scheduler->on_copy_complete(c);
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
      for (const auto& c : done) scheduler->on_copy_complete(c);
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
  std::unique_ptr<CollectiveScheduler> scheduler;
  Communicator comm;
  std::vector<std::vector<std::byte>> send, recv;
  std::map<uint64_t, ErrorCode> completions;  // by rank (session id = rank here)
  std::map<uint64_t, std::string> reasons;    // why, for failures
};

TEST_F(Scheduler, NoRankCompletesBeforeAllArrived) {
  arrive(0, 1, 10000);
  arrive(2, 1, 10000);
  drain_until(0);  // copies 0<->2 land
  EXPECT_TRUE(completions.empty());
  ASSERT_EQ(comm.in_flight.size(), 1u);
  arrive(1, 1, 10000);
  drain_until(kRanks);
  expect_every_rank_gathered(10000);
  EXPECT_TRUE(comm.in_flight.empty());
  EXPECT_EQ(stats
                .collectives[static_cast<uint32_t>(CollectiveKind::kAllGather)]
                            [static_cast<std::size_t>(Outcome::kCompleted)]
                .load(),
            1u);
  EXPECT_EQ(stats.devices[device_slot(kHostMemory, kHostMemory)].copies_total.load(),
            kRanks * kRanks);
  EXPECT_EQ(stats.devices[0].copies_in_flight.load(), 0u);
  EXPECT_EQ(stats.latency[static_cast<uint32_t>(CollectiveKind::kAllGather)][size_class(10000)]
                .count.load(),
            1u);
}

// Copies within the engine's copy_now budget (16 bytes a submission here) are done before
// arrive() returns and tracked by nothing: rank 0's own block at once, and every block bound
// for rank 0 (the first of each later arrival, within its share). The ranks complete once the
// workers' copies land; the counters still see every copy, none of them left in flight.
// Retired collectives' records serve the next ones (no allocation per collective), and hold
// nothing meanwhile: a buffer a finished collective used is not kept mapped by them.
TEST_F(Scheduler, ARetiredCollectiveKeepsNoBufferAndItsRecordServesTheNext) {
  const Collective* first = nullptr;
  for (uint64_t seq = 1; seq <= 3; ++seq) {
    std::vector<std::weak_ptr<MappedBuffer>> used;
    completions.clear();
    for (uint32_t r = 0; r < kRanks; ++r) {
      ValidatedRequest request = plan(r, 4000);
      used.push_back(request.send);
      used.push_back(request.recv);
      scheduler->arrive(comm, r, seq, {r, 0, 1}, std::move(request));
      if (r == 0) {
        ASSERT_EQ(comm.in_flight.size(), 1u);
        if (first == nullptr) first = &comm.in_flight.begin()->second;
        EXPECT_EQ(&comm.in_flight.begin()->second, first) << "seq " << seq << " got a new record";
        EXPECT_EQ(comm.in_flight.begin()->second.seq, seq);
        EXPECT_EQ(comm.in_flight.begin()->second.arrived(), 1u) << "a kept record starts empty";
      }
    }
    drain_until(kRanks);
    expect_every_rank_gathered(4000);
    EXPECT_TRUE(comm.in_flight.empty());
    for (const auto& buffer : used) EXPECT_TRUE(buffer.expired()) << "seq " << seq;
  }
}

TEST_F(Scheduler, SmallCopiesAreDoneAtOnceAndCountedWithNoCompletionToWaitFor) {
  arrive(0, 1, 8);  // its own block: copied at once
  EXPECT_EQ(recv[0][0], std::byte(0));
  EXPECT_FALSE(copies_in_flight());
  // Over the 16-byte budget, each arrival copies its share beside the 2 workers at once.
  arrive(1, 1, 8);        // 24 bytes, a share of 8: 1->0 at once; 0->1 and 1->1 to the workers
  arrive(2, 1, 8);        // 40 bytes, a share of 13: 2->0 at once; the four others to the workers
  expect_gathered(0, 8);  // before any completion was polled
  drain_until(kRanks);
  expect_every_rank_gathered(8);
  const DeviceCounters& host = stats.devices[device_slot(kHostMemory, kHostMemory)];
  EXPECT_EQ(host.copies_total.load(), kRanks * kRanks);
  EXPECT_EQ(host.compute_unit_bytes_total.load(), kRanks * kRanks * 8);
  EXPECT_EQ(host.copies_in_flight.load(), 0u);
  EXPECT_TRUE(comm.in_flight.empty());
}

// A collective whose copies all fit the budget completes inside the last arrival, with no engine
// completion at all.
TEST_F(Scheduler, ACollectiveOfSmallBlocksCompletesInsideTheLastArrival) {
  for (uint32_t r = 0; r < kRanks; ++r) arrive(r, 1, 2);
  expect_every_rank_gathered(2);
  EXPECT_TRUE(comm.in_flight.empty());
  std::vector<CopyCompletion> none;
  EXPECT_EQ(engine->poll(none), 0u);
}

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

// Arrival by arrival, in any order, the scheduler issues exactly the copies of the collective's
// plan (build_plan, the oracle that plan_test checks against the collectives' definitions): no
// pair missed, none issued twice, whichever rank comes first. Every fixed-size collective, 1-6
// ranks, any root, and the pair a matched send and receive become; every copy goes to the engine
// (no budget), so each one is seen.
TEST_F(Scheduler, ArrivalsIssueExactlyThePlansCopiesInAnyOrder) {
  const CollectiveKind kinds[] = {CollectiveKind::kAllGather, CollectiveKind::kAllToAll,
                                  CollectiveKind::kBroadcast, CollectiveKind::kGather,
                                  CollectiveKind::kScatter,   CollectiveKind::kBarrier,
                                  CollectiveKind::kSendRecv};
  std::mt19937 rng(27);
  for (int trial = 0; trial < 1050; ++trial) {
    const CollectiveKind kind = kinds[static_cast<std::size_t>(trial) % std::size(kinds)];
    // A matched send and receive is a pair: the sender is its rank 0 and root.
    const bool pair = kind == CollectiveKind::kSendRecv;
    const uint32_t n = pair ? 2 : 1 + rng() % 6;
    const uint64_t bytes = 1 + rng() % 32;
    const bool one_buffer = kind == CollectiveKind::kBroadcast;
    std::vector<std::vector<std::byte>> sends(n, std::vector<std::byte>(n * bytes));
    std::vector<std::vector<std::byte>> recvs(n, std::vector<std::byte>(n * bytes));
    std::vector<RankArgs> args(n);
    for (RankArgs& a : args) {
      a.kind = kind;
      a.bytes = bytes;
      a.root = pair ? shm::kSenderInPair : static_cast<uint32_t>(trial / std::size(kinds)) % n;
    }
    const auto built = build_plan(args);
    const auto* plan = std::get_if<std::vector<PlannedCopy>>(&built);
    ASSERT_NE(plan, nullptr);
    auto dst_of = [&](uint32_t r) { return (one_buffer ? sends[r] : recvs[r]).data(); };
    std::multiset<std::tuple<const std::byte*, std::byte*, uint64_t>> expected, issued;
    for (const PlannedCopy& c : *plan)
      expected.emplace(sends[c.src_rank].data() + c.src_offset, dst_of(c.dst_rank) + c.dst_offset,
                       c.bytes);

    SteppedEngine stepped;
    schedule_on(stepped);
    completions.clear();
    comm = test_communicator(n);
    std::vector<uint32_t> order(n);
    std::iota(order.begin(), order.end(), 0u);
    std::shuffle(order.begin(), order.end(), rng);
    for (uint32_t r : order) {
      ValidatedRequest p{};
      p.send = std::make_shared<MappedBuffer>(
          MappedBuffer{2 * r, r, sends[r].data(), sends[r].size(), nullptr});
      p.recv = one_buffer ? p.send
                          : std::make_shared<MappedBuffer>(MappedBuffer{
                                2 * r + 1, r, recvs[r].data(), recvs[r].size(), nullptr});
      p.args = args[r];
      scheduler->arrive(comm, r, 1, {r, 0, 1}, std::move(p));
    }
    for (const CopyRequest& c : stepped.queued)
      issued.emplace(static_cast<const std::byte*>(c.src), static_cast<std::byte*>(c.dst), c.bytes);
    EXPECT_EQ(issued, expected) << shm::opcode_name(kind) << ", " << n << " ranks, root "
                                << args[0].root << ", trial " << trial;
    run_all(stepped);
    ASSERT_EQ(completions.size(), n) << shm::opcode_name(kind) << ", trial " << trial;
    for (const auto& [rank, code] : completions) EXPECT_EQ(code, ErrorCode::kOk) << reasons[rank];
    EXPECT_TRUE(comm.in_flight.empty());
  }
}

// A submission within the budget is copied at once whole; a larger one leaves the caller an
// equal share beside the engine's helpers, never more than the budget.
TEST(CopyNowShare, AllWithinTheBudgetThenAnEqualShareBesideTheHelpers) {
  const SteppedEngine four_workers(256 << 10, 4);
  EXPECT_EQ(four_workers.copy_now_share(0), 0u);
  EXPECT_EQ(four_workers.copy_now_share(256 << 10), 256u << 10);
  EXPECT_EQ(four_workers.copy_now_share((256 << 10) + 5), ((256u << 10) + 5) / 5);
  EXPECT_EQ(four_workers.copy_now_share(960 << 10), 192u << 10);  // 8 ranks' last 64 KiB arrival
  EXPECT_EQ(four_workers.copy_now_share(uint64_t{1} << 40), 256u << 10) << "capped by the budget";
  EXPECT_EQ(SteppedEngine(0, 4).copy_now_share(4096), 0u) << "no budget, nothing at once";
}

// The third rank's arrival brings five 256-byte copies (1280 bytes) against a 1024-byte budget
// and three helpers: one copy (its share, 320 bytes) is done at once, four go to the engine; the
// two arrivals before fit the budget whole.
TEST_F(Scheduler, AnArrivalOverTheBudgetCopiesOnlyItsShareAtOnce) {
  SteppedEngine stepped(1024, 3);
  schedule_on(stepped);
  arrive(0, 1, 256);
  arrive(1, 1, 256);
  EXPECT_TRUE(stepped.queued.empty());
  for (uint32_t r : {0u, 1u})
    for (uint32_t src : {0u, 1u})
      EXPECT_EQ(recv[r][src * 256 + 255], std::byte(src * 37 + 255)) << r << " from " << src;
  arrive(2, 1, 256);
  EXPECT_EQ(stepped.queued.size(), 4u);
  EXPECT_TRUE(completions.empty()) << "every rank waits for a block the engine holds";
  run_all(stepped);
  expect_every_rank_gathered(256);
  EXPECT_TRUE(comm.in_flight.empty());
}

// On a GPU engine too, copies between host memory within the budget are done at once (a memcpy
// beats a copy engine's round trip); a copy touching GPU memory still goes to the engine. Here
// rank 1's receive buffer counts as GPU memory: the three blocks bound for it are the engine's,
// the six others are done at once, and ranks 0 and 2 complete only once their blocks reached
// rank 1 too.
TEST_F(Scheduler, OnAGpuEngineOnlyCopiesBetweenHostMemoryAreDoneAtOnce) {
  SteppedEngine stepped(1024);
  schedule_on(stepped);
  auto arrive_on_gpu_for = [&](uint32_t rank, uint32_t gpu_rank) {
    ValidatedRequest p = plan(rank, 8);
    if (rank == gpu_rank) p.recv->device = 0;
    scheduler->arrive(comm, rank, 1, {rank, 0, 1}, std::move(p));
  };
  for (uint32_t r = 0; r < kRanks; ++r) arrive_on_gpu_for(r, 1);
  ASSERT_EQ(stepped.queued.size(), kRanks);
  for (const CopyRequest& c : stepped.queued) {
    EXPECT_EQ(c.dst_device, 0);
    EXPECT_TRUE(c.dst >= recv[1].data() && c.dst < recv[1].data() + recv[1].size())
        << "only copies into rank 1's GPU buffer go to the engine";
  }
  EXPECT_TRUE(completions.empty()) << "every rank's block still has to reach rank 1";
  for (uint32_t r : {0u, 2u}) expect_gathered(r, 8);
  run_all(stepped);
  expect_every_rank_gathered(8);
  EXPECT_TRUE(comm.in_flight.empty());
}

TEST_F(Scheduler, ARankCompletesOnlyOnceItsBlockReachedEveryRank) {
  // Its wait() returning hands the send buffer back to the rank: no copy may still read it.
  SteppedEngine stepped;
  schedule_on(stepped);
  arrive(0, 1, 64);
  arrive(1, 1, 64);
  arrive(2, 1, 64);
  // Land every block into rank 0 first (its own included), but not rank 0's block at the others.
  auto run_where = [&](auto pick) {
    for (std::size_t i = 0; i < stepped.queued.size();) {
      if (!pick(stepped.queued[i])) {
        ++i;
        continue;
      }
      stepped.run(i);
      std::vector<CopyCompletion> done;
      stepped.poll(done);
      for (const auto& c : done) scheduler->on_copy_complete(c);
    }
  };
  const std::byte* rank0_send = send[0].data();
  const std::byte* rank0_recv = recv[0].data();
  run_where([&](const CopyRequest& c) {
    return c.dst >= rank0_recv && c.dst < rank0_recv + recv[0].size();
  });
  ASSERT_TRUE(std::any_of(stepped.queued.begin(), stepped.queued.end(),
                          [&](const CopyRequest& c) { return c.src == rank0_send; }));
  EXPECT_EQ(completions.count(0), 0u) << "rank 0 completed while copies still read its send buffer";
  run_where([](const CopyRequest&) { return true; });
  expect_every_rank_gathered(64);
}

// Copies in flight are found by cookie (a slot and its generation): a completion an engine
// reports twice, or one for a slot reused since, must not count for the copy that holds the slot
// now, and a cookie never handed out changes nothing.
TEST_F(Scheduler, AStaleOrUnknownCookieCountsForNoCopy) {
  SteppedEngine stepped;
  schedule_on(stepped);
  for (uint32_t r = 0; r < kRanks; ++r) arrive(r, 1, 64);
  std::vector<CopyCompletion> first;
  while (!stepped.queued.empty()) {
    stepped.run(0);
    stepped.poll(first);
  }
  for (const auto& c : first) scheduler->on_copy_complete(c);
  ASSERT_EQ(completions.size(), kRanks);
  completions.clear();
  // Seq 2 reuses the slots of seq 1's copies under new generations.
  for (uint32_t r = 0; r < kRanks; ++r) arrive(r, 2, 64);
  ASSERT_EQ(stepped.queued.size(), first.size());
  const uint64_t copies_before = stats.devices[0].copies_total.load();
  for (const auto& c : first) scheduler->on_copy_complete(c);  // reported again: stale
  scheduler->on_copy_complete(
      {0x7fff'ffff'0000'0001, ErrorCode::kOk, TransferPath::kComputeUnits, 64});
  scheduler->on_copy_complete({0, ErrorCode::kEngineError, TransferPath::kComputeUnits, 0});
  EXPECT_TRUE(completions.empty()) << "a stale completion finished a copy of seq 2";
  EXPECT_EQ(stats.devices[0].copies_total.load(), copies_before);
  run_all(stepped);
  expect_every_rank_gathered(64);
}

TEST_F(Scheduler, ZeroByteCollectiveCompletesEveryRank) {
  for (uint32_t r = 0; r < kRanks; ++r) arrive(r, 1, 0);
  ASSERT_EQ(completions.size(), kRanks);
  for (uint32_t r = 0; r < kRanks; ++r) EXPECT_EQ(completions[r], ErrorCode::kOk);
  EXPECT_TRUE(comm.in_flight.empty());
}

TEST_F(Scheduler, InPlaceRanksCompleteWhenTheLastBlockLands) {
  for (uint32_t r = 0; r < kRanks; ++r) {
    ValidatedRequest p = plan(r, 8);
    p.args.self_copy_done = true;  // in place: send is the rank's block of recv
    p.send = p.recv;
    p.args.send_offset = r * 8;
    std::memcpy(recv[r].data() + r * 8, send[r].data(), 8);
    scheduler->arrive(comm, r, 1, {r, 0, 1}, ValidatedRequest(p));
  }
  drain_until(kRanks);
  for (uint32_t r = 0; r < kRanks; ++r) {
    EXPECT_EQ(completions[r], ErrorCode::kOk);
    expect_gathered(r, 8);
  }
}

TEST_F(Scheduler, OwnBlocksCopiedByTheClientsAreNotCopiedAgain) {
  SteppedEngine stepped;
  schedule_on(stepped);
  for (uint32_t r = 0; r < kRanks; ++r) {
    ValidatedRequest p = plan(r, 8);
    p.args.self_copy_done = true;
    std::memcpy(recv[r].data() + r * 8, send[r].data(), 8);  // what the client's stream did
    scheduler->arrive(comm, r, 1, {r, 0, 1}, ValidatedRequest(p));
  }
  EXPECT_EQ(stepped.queued.size(), kRanks * (kRanks - 1)) << "no rank's own block is copied";
  for (const CopyRequest& c : stepped.queued)
    for (uint32_t r = 0; r < kRanks; ++r)
      EXPECT_FALSE(c.src == send[r].data() && c.dst == recv[r].data() + r * 8);
  run_all(stepped);
  expect_every_rank_gathered(8);
}

TEST_F(Scheduler, SizeMismatchFailsEveryRankIncludingLateOnes) {
  arrive(0, 1, 64);
  arrive(1, 1, 65);
  drain_until(2);
  EXPECT_EQ(completions[0], ErrorCode::kSizeMismatch);
  EXPECT_EQ(completions[1], ErrorCode::kSizeMismatch);
  EXPECT_EQ(reasons[0], "rank 1 passed 65 bytes, rank 0 64") << "every rank is told the sizes";
  arrive(2, 1, 64);
  drain_until(3);
  EXPECT_EQ(completions[2], ErrorCode::kSizeMismatch);
  EXPECT_TRUE(comm.in_flight.empty());
  EXPECT_EQ(stats
                .collectives[static_cast<uint32_t>(CollectiveKind::kAllGather)]
                            [static_cast<std::size_t>(Outcome::kFailed)]
                .load(),
            1u);
}

TEST_F(Scheduler, ALateRankGetsTheCollectivesOwnErrorEvenAfterOthersLeft) {
  arrive(0, 1, 64);
  arrive(1, 1, 65);
  drain_until(2);
  comm.members[0].reset();  // rank 0 took its size_mismatch and left
  scheduler->break_comm(comm, ErrorCode::kPeerLost, "rank 0 left");
  arrive(2, 1, 64);
  drain_until(3);
  EXPECT_EQ(completions[2], ErrorCode::kSizeMismatch) << reasons[2];
  arrive(2, 2, 64);  // a collective nobody else reached: the communicator is broken
  EXPECT_EQ(completions[2], ErrorCode::kPeerLost);
}

TEST_F(Scheduler, OneRanksBadRequestFailsTheCollectiveForAll) {
  arrive(0, 1, 100);
  scheduler->arrive_failed(comm, 1, 1, {1, 0, 1}, ErrorCode::kOutOfRange, "offset past the buffer");
  arrive(2, 1, 100);
  drain_until(3);
  for (uint32_t r = 0; r < kRanks; ++r) EXPECT_EQ(completions[r], ErrorCode::kOutOfRange);
}

TEST_F(Scheduler, RanksCallingDifferentCollectivesFailTogether) {
  arrive(0, 1, 64);
  ValidatedRequest other = plan(1, 64);
  other.args.kind = CollectiveKind::kAllToAll;
  scheduler->arrive(comm, 1, 1, {1, 0, 1}, ValidatedRequest(other));
  arrive(2, 1, 64);
  drain_until(3);
  for (uint32_t r = 0; r < kRanks; ++r) EXPECT_EQ(completions[r], ErrorCode::kInvalidArgument);
  EXPECT_TRUE(comm.in_flight.empty());
}

TEST_F(Scheduler, BroadcastCopiesOnlyFromTheRoot) {
  SteppedEngine stepped;
  schedule_on(stepped);
  for (uint32_t r = 0; r < kRanks; ++r) {
    ValidatedRequest p = plan(r, 100);
    p.args.kind = CollectiveKind::kBroadcast;
    p.args.root = 1;
    p.recv = p.send;
    scheduler->arrive(comm, r, 1, {r, 0, 1}, ValidatedRequest(p));
  }
  ASSERT_EQ(stepped.queued.size(), kRanks - 1);
  for (const CopyRequest& c : stepped.queued) EXPECT_EQ(c.src, send[1].data());
  EXPECT_TRUE(completions.empty()) << "no rank completes while the root's copies are in flight";
  run_all(stepped);
  ASSERT_EQ(completions.size(), kRanks);
  for (uint32_t r = 0; r < kRanks; ++r) {
    EXPECT_EQ(completions[r], ErrorCode::kOk);
    for (uint64_t i = 0; i < 100; ++i) ASSERT_EQ(send[r][i], std::byte(37 + i)) << r;
  }
}

TEST_F(Scheduler, BrokenCommunicatorFailsPendingAndLaterCollectives) {
  arrive(0, 1, 50000);
  arrive(1, 1, 50000);
  comm.members[2].reset();  // as the registry does when a rank leaves
  scheduler->break_comm(comm, ErrorCode::kPeerLost, "rank 2 died");
  drain_until(2);
  EXPECT_EQ(completions[0], ErrorCode::kPeerLost);
  EXPECT_EQ(completions[1], ErrorCode::kPeerLost);
  EXPECT_TRUE(comm.in_flight.empty());
  completions.clear();
  arrive(0, 2, 10);
  EXPECT_EQ(completions[0], ErrorCode::kPeerLost);
}

TEST_F(Scheduler, CollectivesBeyondTheLimitFailInsteadOfGrowingWithoutBound) {
  for (uint64_t seq = 1; seq <= 9; ++seq) arrive(0, seq, 8);
  ASSERT_EQ(completions.count(0), 1u);  // only the 9th completed (with an error)
  EXPECT_EQ(completions[0], ErrorCode::kLimitExceeded);
  EXPECT_EQ(scheduler->collectives_in_flight(), 9u);
}

TEST_F(Scheduler, TheLimitIsPerCommunicator) {
  for (uint64_t seq = 1; seq <= 8; ++seq) arrive(0, seq, 8);  // comm at its limit of 8
  Communicator other;
  other.id = 2;
  other.key = "other";
  other.nranks = 1;
  other.members.resize(1);
  other.next_seq.assign(1, 1);
  scheduler->arrive(other, 0, 1, {99, 0, 1}, plan(0, 8));
  drain_until(1);
  EXPECT_EQ(completions[99], ErrorCode::kOk) << "another communicator's backlog failed this one";
}

TEST_F(Scheduler, CopiesThatKeepFailingMakeIrisdUnhealthyUntilOneSucceeds) {
  SteppedEngine stepped;
  schedule_on(stepped);
  Health health(stats, std::chrono::hours(1), 16);
  auto step = [&](bool ok) {
    ok ? stepped.run(0) : stepped.fail(0);
    std::vector<CopyCompletion> done;
    stepped.poll(done);
    for (const auto& c : done) scheduler->on_copy_complete(c);
  };
  // Two all-gathers of 3 ranks: 18 copies (every rank's block into every rank), all failing.
  for (uint64_t seq = 1; seq <= 2; ++seq)
    for (uint32_t r = 0; r < kRanks; ++r) arrive(r, seq, 64);
  ASSERT_EQ(stepped.queued.size(), 18u);
  for (int i = 0; i < 15; ++i) step(false);
  EXPECT_TRUE(health.verdict(Health::Clock::now()).healthy)
      << "15 failures are not yet a broken device";
  step(false);
  const auto verdict = health.verdict(Health::Clock::now());
  EXPECT_FALSE(verdict.healthy);
  EXPECT_NE(verdict.reason.find("the last 16 copies for device host all failed"), std::string::npos)
      << verdict.reason;
  EXPECT_EQ(stats.devices[0].copy_errors_total.load(), 16u);
  step(true);  // the device works again
  EXPECT_TRUE(health.verdict(Health::Clock::now()).healthy);
  step(false);
  EXPECT_EQ(completions.size(), kRanks);
  for (const auto& [rank, code] : completions) EXPECT_EQ(code, ErrorCode::kEngineError) << rank;
}

// After irisd restarted, a rank that had completed a collective takes no part in its re-run:
// every copy to or from it had landed (a rank completes only then), and its buffers are its
// caller's again, so a copy from them now would move whatever the caller wrote since. The ranks
// that had not completed copy between themselves again and complete, once each.
TEST_F(Scheduler, AfterARestartOnlyRanksThatHadNotCompletedCopyAgain) {
  comm.resumed = true;
  comm.resumed_from = {0, 1, 1};  // rank 0 is not back yet; ranks 1 and 2 resubmit seq 1
  comm.resumed_done.resize(kRanks);
  const uint64_t bytes = 10000;
  for (uint32_t r = 1; r < kRanks; ++r) {
    // The first run had landed rank 0's block in ranks 1 and 2 before irisd died.
    for (uint64_t i = 0; i < bytes; ++i) recv[r][i] = std::byte(0 * 37 + i);
  }
  std::fill(send[0].begin(), send[0].end(), std::byte{0x5A});  // rank 0's caller moved on
  std::fill(recv[0].begin(), recv[0].end(), std::byte{0x11});
  arrive(1, 1, bytes);
  arrive(2, 1, bytes);
  drain_until(0);
  EXPECT_TRUE(completions.empty()) << "rank 0 is not back: it may still be unfinished";
  comm.resumed_from[0] = 2;  // back: it had completed seq 1
  scheduler->resumed_rank(comm, 0);
  drain_until(2);
  ASSERT_EQ(completions.size(), 2u);
  for (uint32_t r = 1; r < kRanks; ++r) {
    EXPECT_EQ(completions[r], ErrorCode::kOk);
    expect_gathered(r, bytes);  // block 0 still the first run's, not the scribble
  }
  EXPECT_EQ(completions.count(0), 0u) << "rank 0 had its completion from the previous irisd";
  EXPECT_TRUE(std::all_of(recv[0].begin(), recv[0].end(),
                          [](std::byte b) { return b == std::byte{0x11}; }));
  EXPECT_TRUE(comm.in_flight.empty());
}

// Completions out of order: a rank back at seq 1 that had also completed seq 2 skips it (its next
// submission is seq 3), and seq 2 completes for the others without it.
TEST_F(Scheduler, ACollectiveARankCompletedAfterItsOldestUnfinishedOneIsNotRunForIt) {
  comm.resumed = true;
  comm.resumed_from = {1, 1, 1};
  comm.resumed_done = {{2}, {}, {}};
  EXPECT_EQ(comm.seq_after(0, 1), 3u);
  EXPECT_EQ(comm.seq_after(1, 1), 2u);
  for (uint64_t i = 0; i < 100; ++i) recv[1][i] = recv[2][i] = std::byte(0 * 37 + i);
  std::fill(send[0].begin(), send[0].end(), std::byte{0x5A});
  arrive(1, 2, 100);
  arrive(2, 2, 100);
  drain_until(2);
  ASSERT_EQ(completions.size(), 2u);
  EXPECT_EQ(completions[1], ErrorCode::kOk);
  EXPECT_EQ(completions[2], ErrorCode::kOk);
  expect_gathered(1, 100);
  expect_gathered(2, 100);
}

}  // namespace
}  // namespace iris::daemon
