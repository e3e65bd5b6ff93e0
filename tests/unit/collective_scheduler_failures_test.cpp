// The scheduler's failures, against the real host engine: ranks that disagree or pass bad
// requests, broken communicators, the in-flight limit, copies that keep failing, and the re-run
// rule after a restart of irisd.
#include "daemon/collectives/collective_scheduler.hpp"

#include <gtest/gtest.h>

#include "tests/unit/scheduler_fixture.hpp"

namespace iris::daemon {
namespace {

using testing::Scheduler;
using testing::SteppedEngine;
using testing::test_communicator;

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
    for (const auto& c : done) copies->complete(c);
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
  // While users share the node a latency collective starts its copies once its last rank is
  // there: a rank coming back done can be that rank.
  for (bool shared : {false, true}) {
    SCOPED_TRACE(shared ? "users share the node" : "alone on the node");
    Pacing pacing;
    pacing.queue_bytes = shared ? 4 << 20 : 0;
    schedule_on(*engine, pacing);
    copies->set_users(shared ? 2 : 1);
    completions.clear();
    comm = test_communicator(kRanks);
    comm.resumed = true;
    comm.resumed_from = {0, 1, 1};  // rank 0 is not back yet; ranks 1 and 2 resubmit seq 1
    comm.resumed_done.resize(kRanks);
    const uint64_t bytes = 10000;
    for (uint32_t r = 1; r < kRanks; ++r) {
      std::fill(recv[r].begin(), recv[r].end(), std::byte{0xEE});  // the last loop's gone
      // The first run had landed rank 0's block in ranks 1 and 2 before irisd died.
      for (uint64_t i = 0; i < bytes; ++i) recv[r][i] = std::byte(0 * 37 + i);
    }
    std::fill(send[0].begin(), send[0].end(), std::byte{0x5A});  // rank 0's caller moved on
    std::fill(recv[0].begin(), recv[0].end(), std::byte{0x11});
    arrive(1, 1, bytes);
    arrive(2, 1, bytes);
    drain_until(0);
    EXPECT_TRUE(completions.empty()) << "rank 0 is not back: it may still be unfinished";
    EXPECT_EQ(comm.in_flight.at(1).started_records, shared ? 0u : 2u);
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
