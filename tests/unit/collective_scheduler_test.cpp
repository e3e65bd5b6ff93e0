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
#include "tests/unit/scheduler_fixture.hpp"

namespace iris::daemon {
namespace {

using testing::Scheduler;
using testing::SteppedEngine;
using testing::test_communicator;

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

// Arrival by arrival, in any order, the scheduler issues exactly the copies of the collective's
// plan (build_plan, the oracle that plan_test checks against the collectives' definitions): no
// pair missed, none issued twice, whichever rank comes first. Every fixed-size collective, 1-6
// ranks, any root, and the pair a matched send and receive become; every copy goes to the engine
// (no budget), so each one is seen.
// Alone on the node copies start per arrival; while users share it (paced), a latency
// collective's start once its last rank arrived, as one submission: either way exactly the
// plan's copies, in any arrival order.
TEST_F(Scheduler, ArrivalsIssueExactlyThePlansCopiesInAnyOrder) {
  const CollectiveKind kinds[] = {CollectiveKind::kAllGather, CollectiveKind::kAllToAll,
                                  CollectiveKind::kBroadcast, CollectiveKind::kGather,
                                  CollectiveKind::kScatter,   CollectiveKind::kBarrier,
                                  CollectiveKind::kSendRecv};
  std::mt19937 rng(27);
  for (int trial = 0; trial < 2100; ++trial) {
    const bool shared = trial % 2 == 1;
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
    copies->set_users(shared ? 2 : 1);
    completions.clear();
    comm = test_communicator(n);
    std::vector<uint32_t> order(n);
    std::iota(order.begin(), order.end(), 0u);
    std::shuffle(order.begin(), order.end(), rng);
    for (uint32_t r : order) {
      if (shared) {
        ASSERT_TRUE(stepped.queued.empty())
            << "a latency collective's copies started before its last rank arrived, trial "
            << trial;
      }
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
                                << args[0].root << ", trial " << trial
                                << (shared ? ", shared" : "");
    run_all(stepped);
    ASSERT_EQ(completions.size(), n) << shm::opcode_name(kind) << ", trial " << trial;
    for (const auto& [rank, code] : completions) EXPECT_EQ(code, ErrorCode::kOk) << reasons[rank];
    EXPECT_TRUE(comm.in_flight.empty());
  }
}

// While users share the node, a latency collective of this node's ranks whose copies fit in a
// slice waits for its last rank; one spanning nodes does not wait for the other node's ranks
// (their data comes over the network), and neither a larger latency collective nor a bulk one
// waits: their local copies start per arrival.
TEST_F(Scheduler, OnlyASmallLatencyCollectiveWithinTheNodeWaitsForItsLastRankToStart) {
  SteppedEngine stepped;
  schedule_on(stepped);
  copies->set_users(2);
  arrive(0, 1, 64);
  arrive(1, 1, 64);
  EXPECT_TRUE(stepped.queued.empty()) << "a 64-byte all-gather within the node: latency";
  arrive(2, 1, 64);
  EXPECT_EQ(stepped.queued.size(), kRanks * kRanks) << "every copy at the last arrival";
  run_all(stepped);
  expect_every_rank_gathered(64);

  // 3 x 3 blocks of a ninth of a slice and one byte: latency work, but more than a slice.
  const uint64_t over_a_slice = copies->pacing().slice_bytes / (kRanks * kRanks) + 1;
  const uint64_t bulk = copies->latency_max_bytes() + 1;
  uint64_t seq = 1;
  for (uint64_t bytes : {over_a_slice, bulk}) {
    SCOPED_TRACE(bytes == bulk ? "bulk" : "latency, more than a slice");
    send.assign(kRanks, std::vector<std::byte>(bytes));
    recv.assign(kRanks, std::vector<std::byte>(kRanks * bytes));
    completions.clear();
    ++seq;
    arrive(0, seq, bytes);
    arrive(1, seq, bytes);
    EXPECT_FALSE(stepped.queued.empty()) << "copies start as their ranks arrive";
    arrive(2, seq, bytes);
    run_all(stepped);
    expect_every_rank_gathered(bytes);
  }

  auto layout = std::make_shared<NodeLayout>();
  layout->addresses = {"this", "other"};
  layout->node_of_rank = {0, 0, 1};  // rank 2 lives on the other node
  comm = test_communicator(kRanks);
  comm.layout = layout;
  arrive(0, 1, 64);
  arrive(1, 1, 64);
  EXPECT_EQ(stepped.queued.size(), 4u) << "across nodes the local copies start per arrival";
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
      for (const auto& c : done) copies->complete(c);
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
  for (const auto& c : first) copies->complete(c);
  ASSERT_EQ(completions.size(), kRanks);
  completions.clear();
  // Seq 2 reuses the slots of seq 1's copies under new generations.
  for (uint32_t r = 0; r < kRanks; ++r) arrive(r, 2, 64);
  ASSERT_EQ(stepped.queued.size(), first.size());
  const uint64_t copies_before = stats.devices[0].copies_total.load();
  for (const auto& c : first) copies->complete(c);  // reported again: stale
  copies->complete({0x7fff'ffff'0000'0001, ErrorCode::kOk, TransferPath::kComputeUnits, 64});
  copies->complete({0, ErrorCode::kEngineError, TransferPath::kComputeUnits, 0});
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

}  // namespace
}  // namespace iris::daemon
