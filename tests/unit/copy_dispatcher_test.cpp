// The engine's one door (CopyDispatcher) and the hold scale out gets for a rank's transfers
// (NetworkHold): each completion reaches whoever queued the copy, exactly once, and is counted
// on its device; a hold ends once, after its last part, with the first failure.
#include "daemon/engines/copy_dispatcher.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "daemon/collectives/network_hold.hpp"
#include "daemon/engines/host/host_engine.hpp"

namespace iris::daemon {
namespace {

struct RecordingHoldOwner : NetworkHoldOwner {
  void network_ended(uint64_t tag, ErrorCode code, const std::string& why) override {
    ended.push_back({tag, code, why});
  }
  struct Ended {
    uint64_t tag;
    ErrorCode code;
    std::string why;
  };
  std::vector<Ended> ended;
};

TEST(NetworkHold, EndsOnceAfterItsLastPartWithTheFirstFailure) {
  RecordingHoldOwner owner;
  NetworkHold hold(owner, 7);
  NetworkHold send = hold.split();
  NetworkHold copy = hold.split();
  NetworkHold same_copy = copy;  // a copy of a part is that part (a callback's capture)
  hold.end();
  send.end(ErrorCode::kPeerLost, "node 1 went away");
  EXPECT_TRUE(owner.ended.empty()) << "ended before every part did";
  same_copy.end(ErrorCode::kEngineError, "second failure");
  ASSERT_EQ(owner.ended.size(), 1u);
  EXPECT_EQ(owner.ended[0].tag, 7u);
  EXPECT_EQ(owner.ended[0].code, ErrorCode::kPeerLost);
  EXPECT_EQ(owner.ended[0].why, "node 1 went away");
  copy.end();                       // already ended through its copy: nothing more
  NetworkHold late = send.split();  // split from an ended part: holds nothing
  EXPECT_FALSE(late);
  late.end(ErrorCode::kInternal, "ignored");
  EXPECT_EQ(owner.ended.size(), 1u);
}

TEST(NetworkHold, TheLastPartEndingReleasesTheHoldOnce) {
  RecordingHoldOwner owner;
  {
    NetworkHold hold(owner, 3);
    NetworkHold part = hold.split();
    hold.end();
    EXPECT_TRUE(owner.ended.empty());
    part.end(ErrorCode::kPeerLost, "first");
    part.end(ErrorCode::kInternal, "again");
  }
  ASSERT_EQ(owner.ended.size(), 1u);
  EXPECT_EQ(owner.ended[0].tag, 3u);
  EXPECT_EQ(owner.ended[0].code, ErrorCode::kPeerLost);
  EXPECT_EQ(owner.ended[0].why, "first");
  // A part dropped without end() ends nothing (a transfer abandoned while irisd stops).
  { NetworkHold hold(owner, 4); }
  EXPECT_EQ(owner.ended.size(), 1u);
}

struct RecordingCopyOwner : CopyOwner {
  void copy_done(uint64_t tag, const CopyCompletion& completion) override {
    done.push_back({tag, completion.code});
  }
  std::vector<std::pair<uint64_t, ErrorCode>> done;
};

class Dispatcher : public ::testing::Test {
 protected:
  Dispatcher() : engine(options(), "test"), copies(engine, stats) {}
  static EngineOptions options() {
    EngineOptions o;
    o.workers = 1;
    return o;
  }
  // Polls the engine's completions until `done` holds (10 s at most).
  void drain(const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!done() && std::chrono::steady_clock::now() < deadline)
      if (!copies.poll()) std::this_thread::yield();
  }
  Stats stats;
  HostEngine engine;
  CopyDispatcher copies;
};

TEST_F(Dispatcher, EachCompletionReachesWhoQueuedItAndIsCountedOnce) {
  std::vector<std::byte> a(4096, std::byte{1}), b(4096), c(100, std::byte{2}), d(100);
  RecordingCopyOwner owner;
  CopyRequest tracked{a.data(), b.data(), a.size(), 0};
  copies.track(tracked, owner, 42);
  copies.submit(std::span<const CopyRequest>(&tracked, 1));
  std::vector<ErrorCode> staged;
  copies.submit_one(CopyRequest{c.data(), d.data(), c.size(), 0},
                    [&](ErrorCode code) { staged.push_back(code); });
  EXPECT_EQ(stats.devices[0].copies_in_flight.load(), 2u);
  drain([&] { return owner.done.size() == 1 && staged.size() == 1; });
  ASSERT_EQ(owner.done.size(), 1u);
  EXPECT_EQ(owner.done[0], std::make_pair(uint64_t{42}, ErrorCode::kOk));
  ASSERT_EQ(staged, std::vector<ErrorCode>{ErrorCode::kOk});
  EXPECT_EQ(b, a);
  EXPECT_EQ(d, c);
  EXPECT_EQ(stats.devices[0].copies_in_flight.load(), 0u);
  EXPECT_EQ(stats.devices[0].copies_total.load(), 2u);
  EXPECT_EQ(stats.devices[0].compute_unit_bytes_total.load(), a.size() + c.size());
  // The same completion again (an engine reporting twice) and one never handed out: nothing.
  copies.complete({tracked.cookie, ErrorCode::kOk, TransferPath::kComputeUnits, 4096});
  copies.complete({0x7fff'0000'0000'0003, ErrorCode::kEngineError, TransferPath::kCopyEngine, 1});
  EXPECT_EQ(owner.done.size(), 1u);
  EXPECT_EQ(stats.devices[0].copies_total.load(), 2u);
  EXPECT_EQ(stats.devices[0].copy_errors_total.load(), 0u);
}

TEST_F(Dispatcher, CopiesDoneAtOnceAreCountedAndNeverInFlight) {
  std::vector<std::byte> a(64, std::byte{9}), b(64);
  const HostCopy now{a.data(), b.data(), a.size()};
  copies.copy_now(std::span<const HostCopy>(&now, 1), a.size());
  EXPECT_EQ(b, a);
  EXPECT_EQ(stats.devices[0].copies_total.load(), 1u);
  EXPECT_EQ(stats.devices[0].copies_in_flight.load(), 0u);
  EXPECT_EQ(stats.devices[0].compute_unit_bytes_total.load(), 64u);
}

}  // namespace
}  // namespace iris::daemon
