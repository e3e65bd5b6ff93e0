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
  copies.submit(std::span<const CopyRequest>(&tracked, 1), FlowKey{1000, 1, TrafficClass::kBulk});
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
  copies.copy_now(std::span<const HostCopy>(&now, 1), a.size(),
                  FlowKey{1000, 1, TrafficClass::kLatency});
  EXPECT_EQ(b, a);
  EXPECT_EQ(stats.devices[0].copies_total.load(), 1u);
  EXPECT_EQ(stats.devices[0].copies_in_flight.load(), 0u);
  EXPECT_EQ(stats.devices[0].compute_unit_bytes_total.load(), 64u);
  EXPECT_EQ(stats.classes[0].bytes_total.load(), 64u);
  ASSERT_TRUE(stats.users[0].used.load());
  EXPECT_EQ(stats.users[0].uid.load(), 1000u);
  EXPECT_EQ(stats.users[0].bytes_total.load(), 64u);
}

// An engine that only records what it was handed: the test completes the copies itself, so that
// what the dispatcher keeps back is seen exactly.
class RecordingEngine final : public Engine {
 public:
  RecordingEngine() : Engine(0) { description_.name = "recording"; }
  const EngineDescription& description() const override { return description_; }
  void submit(std::span<const CopyRequest> copies) override {
    for (const CopyRequest& c : copies) handed.push_back(c);
  }
  void stop() override {}
  std::size_t poll(std::vector<CopyCompletion>&) override { return 0; }
  int completion_fd() const override { return -1; }
  bool keeps_latency_engine(int) const override { return latency_engine; }
  bool serves_latency_first() const override { return latency_first; }
  // As CUDA's engine: a copy within one GPU has a faster path (here 4 times the bound's).
  uint32_t pace_scale(const CopyRequest& c) const override { return within_one_gpu(c) ? 4 : 1; }
  uint64_t at_engine() const {
    uint64_t bytes = 0;
    for (std::size_t i = completed; i < handed.size(); ++i) bytes += handed[i].bytes;
    return bytes;
  }
  std::vector<CopyRequest> handed;
  std::size_t completed = 0;  // handed[0, completed) were completed, in order
  bool latency_engine = false;
  bool latency_first = false;

 private:
  EngineDescription description_;
};

// The clock the Paced tests' dispatcher reads: it stands still unless a test moves it, so that
// the hold after a shared moment (a second) never runs out under a slow machine.
std::chrono::steady_clock::time_point test_now{};
std::chrono::steady_clock::time_point read_test_now() { return test_now; }

class Paced : public ::testing::Test {
 protected:
  static constexpr uint64_t kMiB = 1 << 20;
  Paced() : copies(engine, stats, Pacing{2 * kMiB, 8 * kMiB, 8, kMiB, {1000}, ""}, &read_test_now) {
    test_now = std::chrono::steady_clock::time_point{} + std::chrono::hours(1);
  }
  // Completes the oldest slice the engine holds (`code`).
  void complete_next(ErrorCode code = ErrorCode::kOk) {
    const CopyRequest& c = engine.handed.at(engine.completed++);
    copies.complete({c.cookie, code, TransferPath::kCopyEngine, c.bytes});
  }
  // Completes the slice the engine was handed at `i`, in whatever order, through `d`.
  void complete_at(std::size_t i, CopyDispatcher& d) {
    const CopyRequest& c = engine.handed.at(i);
    d.complete({c.cookie, ErrorCode::kOk, TransferPath::kCopyEngine, c.bytes});
  }
  void complete_at(std::size_t i) { complete_at(i, copies); }
  // Completes every slice handed from `first` on but `done` (completed already; none by default),
  // and those that completing them hands the engine.
  void complete_rest(std::size_t first, std::size_t done = SIZE_MAX) {
    for (std::size_t i = first; i < engine.handed.size(); ++i)
      if (i != done) complete_at(i);
  }
  // Copies of two other users at once, done at once: the device counts as shared (paced) for
  // the hold after it.
  void share_device() {
    for (uint32_t uid : {998u, 999u}) {
      CopyRequest other{memory.data(), memory.data() + 60 * kMiB, 4096, 0};
      copies.track(other, owner, uid);
      copies.submit(std::span<const CopyRequest>(&other, 1),
                    FlowKey{uid, 9, TrafficClass::kLatency});
    }
    complete_next();
    complete_next();
    owner.done.clear();
  }
  // `uid`'s engine counters (its slot in Stats::users).
  const UserEngineCounters& user(uint32_t uid) const {
    for (const auto& u : stats.users)
      if (u.used.load() && u.uid.load() == uid) return u;
    throw std::runtime_error("no slot for uid " + std::to_string(uid));
  }
  Stats stats;
  RecordingEngine engine;
  CopyDispatcher copies;
  RecordingCopyOwner owner;
  std::vector<std::byte> memory = std::vector<std::byte>(64 * kMiB);
};

// The class a communicator asks for is capped: bulk always, latency beyond --latency-max-bytes
// only where granted (--latency-uids, --latency-group); auto by size.
TEST_F(Paced, TheClassAskedForIsGrantedOrLoweredBySize) {
  EXPECT_EQ(copies.class_of(4096, RequestedClass::kBulk, true), TrafficClass::kBulk);
  EXPECT_EQ(copies.class_of(4096, RequestedClass::kAuto, false), TrafficClass::kLatency);
  EXPECT_EQ(copies.class_of(2 * kMiB, RequestedClass::kAuto, true), TrafficClass::kBulk);
  EXPECT_EQ(copies.class_of(2 * kMiB, RequestedClass::kLatency, false), TrafficClass::kBulk);
  EXPECT_EQ(copies.class_of(kMiB, RequestedClass::kLatency, false), TrafficClass::kLatency);
  EXPECT_EQ(copies.class_of(64 * kMiB, RequestedClass::kLatency, true), TrafficClass::kLatency);
}

TEST_F(Paced, AUserAloneHandsTheEngineEachCopyWhole) {
  CopyRequest big{memory.data(), memory.data() + 32 * kMiB, 20 * kMiB, 0};
  copies.track(big, owner, 5);
  copies.submit(std::span<const CopyRequest>(&big, 1), FlowKey{1000, 1, TrafficClass::kBulk});
  ASSERT_EQ(engine.handed.size(), 1u);
  EXPECT_EQ(engine.handed[0].bytes, big.bytes);
  EXPECT_EQ(engine.handed[0].queue, EngineQueue::kAny);
  // Another user's copy while it runs: from now on the device is shared, and paced.
  CopyRequest other{memory.data(), memory.data() + 56 * kMiB, 6 * kMiB, 0};
  copies.track(other, owner, 6);
  copies.submit(std::span<const CopyRequest>(&other, 1), FlowKey{1001, 2, TrafficClass::kBulk});
  EXPECT_EQ(engine.handed.size(), 1u) << "20 MiB at the engine already: the other copy waits";
  complete_next();
  EXPECT_EQ(engine.handed.size(), 1u + 3u);
  EXPECT_EQ(engine.handed[1].bytes, 2 * kMiB);
  while (engine.completed < engine.handed.size()) complete_next();
  EXPECT_EQ(owner.done.size(), 2u);
}

TEST_F(Paced, WhileTwoUsersAreAttachedEveryCopyIsPaced) {
  copies.set_users(2);
  CopyRequest big{memory.data(), memory.data() + 32 * kMiB, 20 * kMiB, 0};
  copies.track(big, owner, 5);
  copies.submit(std::span<const CopyRequest>(&big, 1), FlowKey{1000, 1, TrafficClass::kBulk});
  EXPECT_EQ(engine.handed.size(), 4u);
  EXPECT_EQ(engine.at_engine(), 8 * kMiB);
  while (engine.completed < engine.handed.size()) complete_next();
  EXPECT_EQ(owner.done.size(), 1u);
}

TEST_F(Paced, ALargeCopyGoesInSlicesWithNoMoreThanTheBoundAtTheEngine) {
  share_device();
  CopyRequest big{memory.data(), memory.data() + 32 * kMiB, 20 * kMiB + 3, 0};
  copies.track(big, owner, 5);
  copies.submit(std::span<const CopyRequest>(&big, 1), FlowKey{1000, 1, TrafficClass::kBulk});
  EXPECT_EQ(engine.handed.size(), 2u + 4u);
  EXPECT_EQ(engine.at_engine(), 8 * kMiB);
  uint64_t offset = 0;
  while (engine.completed < engine.handed.size()) {
    const CopyRequest& slice = engine.handed[engine.completed];
    EXPECT_EQ(slice.src, big.src + offset);
    EXPECT_EQ(slice.dst, big.dst + offset);
    EXPECT_LE(slice.bytes, 2 * kMiB);
    offset += slice.bytes;
    EXPECT_TRUE(owner.done.empty()) << "done before its last slice";
    complete_next();
    EXPECT_LE(engine.at_engine(), 8 * kMiB);
  }
  EXPECT_EQ(offset, big.bytes);
  EXPECT_EQ(engine.handed.size(), 2u + 11u);
  ASSERT_EQ(owner.done.size(), 1u);
  EXPECT_EQ(owner.done[0], std::make_pair(uint64_t{5}, ErrorCode::kOk));
  EXPECT_EQ(stats.devices[0].copies_total.load(), 3u);
  EXPECT_EQ(stats.devices[0].copies_in_flight.load(), 0u);
  EXPECT_EQ(stats.devices[0].copy_engine_bytes_total.load(), big.bytes + 2 * 4096);
  EXPECT_EQ(stats.classes[1].bytes_total.load(), big.bytes);
  EXPECT_EQ(stats.classes[1].queue_delay.count.load(), 1u);
}

TEST_F(Paced, ASmallCopyWaitsBehindOneSliceNotBehindAWholeTransfer) {
  share_device();
  CopyRequest bulk{memory.data(), memory.data() + 32 * kMiB, 30 * kMiB, 0};
  copies.track(bulk, owner, 1);
  copies.submit(std::span<const CopyRequest>(&bulk, 1), FlowKey{1000, 1, TrafficClass::kBulk});
  CopyRequest small{memory.data(), memory.data() + 8, 4096, 0};
  copies.track(small, owner, 2);
  copies.submit(std::span<const CopyRequest>(&small, 1), FlowKey{1001, 2, TrafficClass::kLatency});
  EXPECT_EQ(engine.handed.size(), 2u + 4u) << "the bound is full: the small copy waits";
  complete_next();
  ASSERT_EQ(engine.handed.size(), 2u + 6u);  // room again: the small copy first, then bulk's next
  EXPECT_EQ(engine.handed[6].cookie, small.cookie);
  EXPECT_EQ(engine.handed[6].queue, EngineQueue::kAny) << "an engine that orders nothing";
  while (engine.completed < 7) complete_next();
  ASSERT_EQ(owner.done.size(), 1u);
  EXPECT_EQ(owner.done[0].first, 2u) << "the small copy ended while the transfer goes on";
  while (engine.completed < engine.handed.size()) complete_next();
  EXPECT_EQ(owner.done.size(), 2u);
}

// An engine that serves latency work before its queued bulk (the host engine's workers): a latency
// copy goes to it at once, marked for that, whatever bulk has there (a bound of its own); bulk
// keeps the whole bound in whole slices beside it, since nothing queued stands in its way.
TEST_F(Paced, WhereTheEngineServesLatencyFirstSmallCopiesPassTheBulkBound) {
  engine.latency_first = true;
  copies.set_users(2);
  CopyRequest bulk{memory.data(), memory.data() + 32 * kMiB, 30 * kMiB, 0};
  copies.track(bulk, owner, 1);
  copies.submit(std::span<const CopyRequest>(&bulk, 1), FlowKey{1000, 1, TrafficClass::kBulk});
  ASSERT_EQ(engine.handed.size(), 4u);
  CopyRequest small{memory.data(), memory.data() + 8, 4096, 0};
  copies.track(small, owner, 2);
  copies.submit(std::span<const CopyRequest>(&small, 1), FlowKey{1001, 2, TrafficClass::kLatency});
  ASSERT_EQ(engine.handed.size(), 5u) << "the small copy waited for room in bulk's bound";
  EXPECT_EQ(engine.handed[4].cookie, small.cookie);
  EXPECT_EQ(engine.handed[4].queue, EngineQueue::kLatency);
  complete_at(4);
  ASSERT_EQ(owner.done.size(), 1u);
  EXPECT_EQ(owner.done[0].first, 2u);
  EXPECT_EQ(engine.handed.size(), 5u) << "a latency copy's end makes no room for bulk";
  complete_next();
  ASSERT_EQ(engine.handed.size(), 6u);
  EXPECT_EQ(engine.handed[5].cookie, bulk.cookie);
  EXPECT_EQ(engine.handed[5].bytes, 2 * kMiB) << "beside latency work bulk keeps whole slices";
  EXPECT_EQ(engine.handed[5].queue, EngineQueue::kAny);
  EXPECT_EQ(engine.at_engine(), 8 * kMiB + small.bytes) << "and the whole bound";
  complete_rest(1, 4);
  EXPECT_EQ(owner.done.size(), 2u);
  EXPECT_EQ(engine.handed.size(), 15u + 1u) << "fifteen 2 MiB slices and the small copy";
}

// A GPU whose engine keeps a copy engine for latency work: latency copies go there at once,
// whatever bulk has at the engine, with a bound of their own; bulk slices go to the other engines
// while latency work comes, with half the bound in half slices (before any, and a second after
// the last, they have the whole bound and may use every engine).
TEST_F(Paced, WhereAnEngineIsKeptForLatencyWorkSmallCopiesPassTheBulkBound) {
  engine.latency_engine = true;
  copies.set_users(2);
  auto on_gpu = [&](uint64_t at, uint64_t bytes) {
    return CopyRequest{memory.data(), memory.data() + at, bytes, 0, kHostMemory, 0};
  };
  CopyRequest bulk = on_gpu(32 * kMiB, 30 * kMiB);
  copies.track(bulk, owner, 1);
  copies.submit(std::span<const CopyRequest>(&bulk, 1), FlowKey{1000, 1, TrafficClass::kBulk});
  ASSERT_EQ(engine.handed.size(), 4u);
  for (const CopyRequest& c : engine.handed) EXPECT_EQ(c.queue, EngineQueue::kAny);
  // Ten 1 MiB latency copies of another user: eight (the bound) at once, beside bulk's 8 MiB.
  std::vector<CopyRequest> small;
  for (uint64_t i = 0; i < 10; ++i) {
    small.push_back(on_gpu(i * kMiB, kMiB));
    copies.track(small.back(), owner, 10 + i);
  }
  copies.submit(small, FlowKey{1001, 2, TrafficClass::kLatency});
  ASSERT_EQ(engine.handed.size(), 4u + 8u);
  for (std::size_t i = 4; i < engine.handed.size(); ++i) {
    EXPECT_EQ(engine.handed[i].queue, EngineQueue::kLatency);
    EXPECT_EQ(engine.handed[i].cookie, small[i - 4].cookie);
  }
  // A latency copy's end makes room for latency only.
  complete_at(4);
  ASSERT_EQ(engine.handed.size(), 13u);
  EXPECT_EQ(engine.handed[12].cookie, small[8].cookie);
  EXPECT_EQ(engine.handed[12].queue, EngineQueue::kLatency);
  ASSERT_EQ(owner.done.size(), 1u);
  EXPECT_EQ(owner.done[0].first, 10u);
  // Beside latency work bulk gets half the bound (4 MiB) in half slices (1 MiB), on the other
  // engines: its end makes room for bulk only once less than that is at the engine.
  complete_at(0);
  complete_at(1);
  EXPECT_EQ(engine.handed.size(), 13u) << "4 MiB of bulk at the engine: half the bound";
  complete_at(2);
  ASSERT_EQ(engine.handed.size(), 15u);
  for (std::size_t i : {13u, 14u}) {
    EXPECT_EQ(engine.handed[i].cookie, bulk.cookie);
    EXPECT_EQ(engine.handed[i].bytes, kMiB);
    EXPECT_EQ(engine.handed[i].queue, EngineQueue::kBulk);
  }
  EXPECT_EQ(engine.handed[14].src, bulk.src + 9 * kMiB);
  // A second after the last latency copy, bulk has the whole bound, whole slices and every
  // engine again.
  test_now += std::chrono::seconds(2);
  complete_at(3);
  ASSERT_EQ(engine.handed.size(), 18u);
  for (std::size_t i : {15u, 16u, 17u}) {
    EXPECT_EQ(engine.handed[i].bytes, 2 * kMiB);
    EXPECT_EQ(engine.handed[i].queue, EngineQueue::kAny);
  }
  // Everything ends (what completing hands the engine is completed in turn), each copy once.
  for (std::size_t i = 5; i < engine.handed.size(); ++i) complete_at(i);
  EXPECT_EQ(owner.done.size(), 11u);
  EXPECT_EQ(engine.handed.size(), 4u + 2u + 10u + 10u);  // bulk's slices, then latency's copies
  EXPECT_EQ(stats.devices[1].copies_in_flight.load(), 0u);
}

// However small the bound, half of it beside latency work still lets bulk through: a stream of
// small collectives must never stop a transfer.
TEST_F(Paced, BesideLatencyWorkBulkMovesUnderTheSmallestBound) {
  engine.latency_engine = true;
  CopyDispatcher tiny(engine, stats, Pacing{2 * kMiB, 1, 8, kMiB, {}, ""}, &read_test_now);
  tiny.set_users(2);
  CopyRequest bulk{memory.data(), memory.data() + 32 * kMiB, 4 * kMiB, 0, kHostMemory, 0};
  tiny.track(bulk, owner, 1);
  tiny.submit(std::span<const CopyRequest>(&bulk, 1), FlowKey{1000, 1, TrafficClass::kBulk});
  ASSERT_EQ(engine.handed.size(), 1u);
  CopyRequest small{memory.data(), memory.data() + 8, 4096, 0, kHostMemory, 0};
  tiny.track(small, owner, 2);
  tiny.submit(std::span<const CopyRequest>(&small, 1), FlowKey{1001, 2, TrafficClass::kLatency});
  ASSERT_EQ(engine.handed.size(), 2u);
  EXPECT_EQ(engine.handed[1].cookie, small.cookie);
  complete_at(0, tiny);
  ASSERT_EQ(engine.handed.size(), 3u) << "bulk stopped while latency work comes";
  EXPECT_EQ(engine.handed[2].cookie, bulk.cookie);
  EXPECT_EQ(engine.handed[2].bytes, kMiB);
  for (std::size_t i = 1; i < engine.handed.size(); ++i) complete_at(i, tiny);
  EXPECT_EQ(owner.done.size(), 2u);
}

// A copy on a faster path (within one GPU, 4 times here) waits in a lane of its own with 4 times
// the bound and the slices: neither lane's slices wait for room in the other's.
TEST_F(Paced, ACopyOnAFasterPathIsPacedInALaneOfItsOwnAtAScaledBound) {
  copies.set_users(2);
  auto copy = [&](uint64_t at, uint64_t bytes, int src_device) {
    return CopyRequest{memory.data(), memory.data() + at, bytes, 0, src_device, 0};
  };
  CopyRequest over_pcie = copy(48 * kMiB, 16 * kMiB, kHostMemory);
  copies.track(over_pcie, owner, 1);
  copies.submit(std::span<const CopyRequest>(&over_pcie, 1), FlowKey{1000, 1, TrafficClass::kBulk});
  ASSERT_EQ(engine.handed.size(), 4u) << "8 MiB in 2 MiB slices";
  CopyRequest within_gpu = copy(8 * kMiB, 40 * kMiB, 0);
  copies.track(within_gpu, owner, 2);
  copies.submit(std::span<const CopyRequest>(&within_gpu, 1),
                FlowKey{1001, 2, TrafficClass::kBulk});
  ASSERT_EQ(engine.handed.size(), 8u) << "32 MiB in 8 MiB slices, beside the full PCIe lane";
  for (std::size_t i = 4; i < 8; ++i) {
    EXPECT_EQ(engine.handed[i].cookie, within_gpu.cookie);
    EXPECT_EQ(engine.handed[i].bytes, 8 * kMiB);
  }
  // A slice's end makes room in its own lane only.
  complete_at(4);
  ASSERT_EQ(engine.handed.size(), 9u);
  EXPECT_EQ(engine.handed[8].cookie, within_gpu.cookie);
  EXPECT_EQ(engine.handed[8].bytes, 8 * kMiB) << "the last of five";
  complete_at(5);
  EXPECT_EQ(engine.handed.size(), 9u) << "nothing of the copy within the GPU is left";
  complete_at(0);
  ASSERT_EQ(engine.handed.size(), 10u);
  EXPECT_EQ(engine.handed[9].cookie, over_pcie.cookie);
  EXPECT_EQ(engine.handed[9].bytes, 2 * kMiB);
  for (std::size_t i = 6; i < 9; ++i) complete_at(i);
  ASSERT_EQ(owner.done.size(), 1u);
  EXPECT_EQ(owner.done[0], std::make_pair(uint64_t{2}, ErrorCode::kOk));
  for (std::size_t i : {1, 2, 3}) complete_at(i);
  complete_rest(9);
  EXPECT_EQ(owner.done.size(), 2u);
  EXPECT_EQ(engine.handed.size(), 5u + 8u) << "five 8 MiB slices and eight 2 MiB ones";
  EXPECT_EQ(stats.devices[1].copies_in_flight.load(), 0u);
}

TEST_F(Paced, AFailedSliceFailsItsCopyOnceAfterTheLastSlice) {
  share_device();
  CopyRequest big{memory.data(), memory.data() + 32 * kMiB, 6 * kMiB, 0};
  copies.track(big, owner, 9);
  copies.submit(std::span<const CopyRequest>(&big, 1), FlowKey{1000, 1, TrafficClass::kBulk});
  complete_next(ErrorCode::kEngineError);
  complete_next();
  EXPECT_TRUE(owner.done.empty());
  complete_next();
  ASSERT_EQ(owner.done.size(), 1u);
  EXPECT_EQ(owner.done[0], std::make_pair(uint64_t{9}, ErrorCode::kEngineError));
  EXPECT_EQ(stats.devices[0].copy_errors_total.load(), 1u);
  // A completion for it again: nothing.
  copies.complete({big.cookie, ErrorCode::kOk, TransferPath::kCopyEngine, 1});
  EXPECT_EQ(owner.done.size(), 1u);
}

// Engine time: from when the device's engines got copies, each interval up to a completion goes
// to the user whose copy completed; time with nothing at the engine goes to nobody. The
// dispatcher reads the test's clock, which only the test moves.
TEST_F(Paced, EngineTimeAndBytesCountForTheUserWhoseCopyCompleted) {
  using namespace std::chrono_literals;
  CopyRequest a{memory.data(), memory.data() + 32 * kMiB, 4096, 0};
  CopyRequest b{memory.data(), memory.data() + 40 * kMiB, 8192, 0};
  copies.track(a, owner, 1);
  copies.submit(std::span<const CopyRequest>(&a, 1), FlowKey{1000, 1, TrafficClass::kLatency});
  copies.track(b, owner, 2);
  copies.submit(std::span<const CopyRequest>(&b, 1), FlowKey{1001, 2, TrafficClass::kBulk});
  test_now += 20ms;
  complete_next();
  test_now += 10ms;
  complete_next();
  EXPECT_EQ(user(1000).bytes_total.load(), 4096u);
  EXPECT_EQ(user(1001).bytes_total.load(), 8192u);
  EXPECT_EQ(user(1000).busy_ns_total.load(), 20'000'000u);
  EXPECT_EQ(user(1001).busy_ns_total.load(), 10'000'000u);
  EXPECT_EQ(stats.classes[0].busy_ns_total.load(), 20'000'000u);
  EXPECT_EQ(stats.classes[1].busy_ns_total.load(), 10'000'000u);
  // Idle for 500 ms, then a copy that takes 3 ms: only those 3 ms are its user's.
  test_now += 500ms;
  CopyRequest c{memory.data(), memory.data() + 48 * kMiB, 4096, 0};
  copies.track(c, owner, 3);
  copies.submit(std::span<const CopyRequest>(&c, 1), FlowKey{1000, 1, TrafficClass::kLatency});
  test_now += 3ms;
  complete_next();
  EXPECT_EQ(user(1000).bytes_total.load(), 2 * 4096u);
  EXPECT_EQ(user(1000).busy_ns_total.load(), 23'000'000u);
}

// An engine that knows how long it served each copy (CopyCompletion::engine_ns) is believed over
// the completions' spacing: two copies served side by side by two engines, ending 1 ms apart
// after 20 ms each, are 20 ms of engine time each, not 20 and 1.
TEST_F(Paced, EngineTimeTheEngineReportsIsTheUsersEvenWhenEnginesOverlap) {
  using namespace std::chrono_literals;
  CopyRequest a{memory.data(), memory.data() + 32 * kMiB, 4096, 0};
  CopyRequest b{memory.data(), memory.data() + 40 * kMiB, 4096, 0};
  copies.track(a, owner, 1);
  copies.submit(std::span<const CopyRequest>(&a, 1), FlowKey{1000, 1, TrafficClass::kBulk});
  copies.track(b, owner, 2);
  copies.submit(std::span<const CopyRequest>(&b, 1), FlowKey{1001, 2, TrafficClass::kBulk});
  test_now += 20ms;
  copies.complete({a.cookie, ErrorCode::kOk, TransferPath::kCopyEngine, a.bytes, 20'000'000});
  test_now += 1ms;
  copies.complete({b.cookie, ErrorCode::kOk, TransferPath::kCopyEngine, b.bytes, 21'000'000});
  EXPECT_EQ(user(1000).busy_ns_total.load(), 20'000'000u);
  EXPECT_EQ(user(1001).busy_ns_total.load(), 21'000'000u);  // by spacing it would have been 1 ms
  EXPECT_EQ(stats.classes[1].busy_ns_total.load(), 41'000'000u);
}

// Users past the slots share the last one; each slot is given once.
TEST_F(Paced, UsersPastTheSlotsShareTheLastOne) {
  for (uint32_t uid = 0; uid < kUserSlots + 6; ++uid) {
    CopyRequest c{memory.data(), memory.data() + 32 * kMiB, 100 + uid, 0};
    copies.track(c, owner, uid);
    copies.submit(std::span<const CopyRequest>(&c, 1), FlowKey{uid, uid, TrafficClass::kBulk});
    complete_next();
  }
  uint64_t others = 0;
  for (uint32_t uid = kUserSlots - 1; uid < kUserSlots + 6; ++uid) others += 100 + uid;
  for (std::size_t slot = 0; slot + 1 < kUserSlots; ++slot) {
    EXPECT_EQ(stats.users[slot].uid.load(), slot);
    EXPECT_EQ(stats.users[slot].bytes_total.load(), 100 + slot);
  }
  EXPECT_TRUE(stats.users[kUserSlots - 1].used.load());
  EXPECT_EQ(stats.users[kUserSlots - 1].bytes_total.load(), others);
}

}  // namespace
}  // namespace iris::daemon
