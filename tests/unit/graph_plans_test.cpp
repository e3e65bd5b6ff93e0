// Collectives captured into CUDA graphs, daemon side: the real Runtime with its GraphPlans and
// scheduler, over an engine that copies plain memory and keeps "GPU" done flags in plain memory
// (this machine has no GPU); the graphs' memory operations are played by the test through the
// session segments, as a replay would: write ready = 1, wait for done = 1, write done = 0.
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <thread>
#include <vector>

#include "daemon/runtime.hpp"
#include "iris/shared/segment_layout.hpp"
#include "iris/shared/shm_segment.hpp"

namespace iris::daemon {
namespace {

// Copies at once on submit (reported on the next poll); imports "GPU memory" as plain memory,
// one region per import, and writes done flags there.
class PlainMemoryEngine final : public Engine {
 public:
  PlainMemoryEngine() : Engine(0), fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  ~PlainMemoryEngine() override { ::close(fd_); }
  const EngineDescription& description() const override { return description_; }
  void stop() override {}  // copies on the submitting thread
  void submit(std::span<const CopyRequest> copies) override {
    for (const CopyRequest& c : copies) {
      std::memcpy(c.dst, c.src, c.bytes);
      done_.push_back({c.cookie, ErrorCode::kOk, TransferPath::kCopyEngine, c.bytes});
    }
  }
  std::size_t poll(std::vector<CopyCompletion>& out) override {
    const std::size_t n = done_.size();
    out.insert(out.end(), done_.begin(), done_.end());
    done_.clear();
    return n;
  }
  int completion_fd() const override { return fd_; }
  ImportedMemory import_device_memory(const DeviceBufferExport& exported) override {
    regions_.emplace_back(exported.bytes);
    return {regions_.back().data(), exported.bytes, 0, nullptr};
  }
  void write_device_word(int, std::byte* address, uint32_t value) override {
    std::memcpy(address, &value, sizeof(value));
  }
  // The done flags of the n-th import (each session registers its flags first).
  uint32_t* flags(std::size_t n) { return reinterpret_cast<uint32_t*>(regions_[n].data()); }

 private:
  EngineDescription description_{"plain", "test", {}, "", "", ""};
  std::deque<std::vector<std::byte>> regions_;
  std::vector<CopyCompletion> done_;
  int fd_;
};

struct Rank {
  AttachResult attached;
  int peer = -1;  // the client's end of the attach connection
  shm::ShmSegment segment;
  shm::SegmentView view;
  RegisteredBuffer send, recv;
  uint32_t* done_flags = nullptr;
  uint64_t comm = 0;
};

class GraphPlansTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kBytes = 96;

  void SetUp() override {
    config.socket_path = "/tmp/iris-graph-test-" + std::to_string(::getpid()) + ".sock";
    config.limits.graph_replay_timeout_ms = 100;
    runtime = std::make_unique<Runtime>(config, engine, stats, loop);
  }
  void TearDown() override {
    for (Rank& r : ranks) {
      runtime->end_session(r.attached.session_id, false);
      ::close(r.peer);
    }
    runtime.reset();
    for (int fd : connections) ::close(fd);
  }

  Rank& join(uint32_t rank, uint32_t nranks) {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    connections.push_back(fds[0]);
    Rank& r = ranks.emplace_back();
    r.peer = fds[1];
    r.attached = runtime->attach({::getpid(), ::getuid(), ::getgid()}, "rank", fds[0]);
    runtime->start_serving(r.attached.session_id);  // as the attach listener does once answered
    runtime->register_device_done_flags(
        r.attached.session_id, {DeviceApi::kCuda, "handle", "0000:00:00.0", 0, 4096, {}, {}});
    r.done_flags = engine.flags(ranks.size() - 1);
    r.send = runtime->register_buffer(r.attached.session_id, kBytes);
    r.recv = runtime->register_buffer(r.attached.session_id, kBytes * nranks);
    r.comm = runtime->comm_init(r.attached.session_id, "graphs", nranks, rank);
    r.segment = shm::ShmSegment::map(std::move(r.attached.segment));
    r.view = *shm::validate_segment(r.segment.data(), r.segment.size());
    return r;
  }

  // Two ranks that captured an all-gather each, into plan slots `slot_a` and `slot_b`.
  std::pair<Rank*, Rank*> two_ranks_captured(uint32_t slot_a, uint32_t slot_b) {
    Rank& a = join(0, 2);
    Rank& b = join(1, 2);
    runtime->register_graph_plan(a.attached.session_id, all_gather(a), slot_a);
    runtime->register_graph_plan(b.attached.session_id, all_gather(b), slot_b);
    return {&a, &b};
  }

  // What libiris sends at capture: the ring entry of the call, stream-ordered.
  shm::SubmitEntry all_gather(const Rank& r) {
    auto e = shm::collective_entry(
        {shm::Opcode::kAllGather, r.comm, r.send.id, 0, r.recv.id, 0, kBytes});
    e.flags = shm::kStreamOrdered;
    return e;
  }

  // A send of `bytes` at `offset` of r.send to `peer`, or a receive from `peer` into r.recv.
  shm::SubmitEntry point_to_point(const Rank& r, shm::Opcode op, uint32_t peer, uint64_t offset,
                                  uint64_t bytes) {
    const bool send = op == shm::Opcode::kSend;
    auto e = shm::collective_entry({.opcode = op,
                                    .comm_id = r.comm,
                                    .send_buffer = send ? r.send.id : shm::kNoBuffer,
                                    .send_offset = send ? offset : 0,
                                    .recv_buffer = send ? shm::kNoBuffer : r.recv.id,
                                    .recv_offset = send ? 0 : offset,
                                    .bytes = bytes,
                                    .root = peer});
    e.flags = shm::kStreamOrdered;
    return e;
  }

  // Buffer ids are each session's own: a rank's buffers are found by the rank's record of them.
  std::byte* memory(const RegisteredBuffer& b) {
    for (auto& m : mappings)
      if (m.first == &b) return static_cast<std::byte*>(m.second.data());
    return nullptr;
  }
  void map_buffers(Rank& r) {
    mappings.emplace_back(&r.send, shm::ShmSegment::map(std::move(r.send.memfd)));
    mappings.emplace_back(&r.recv, shm::ShmSegment::map(std::move(r.recv.memfd)));
  }

  uint32_t index(const Rank& r, uint32_t plan_slot) const { return r.view.ring_depth + plan_slot; }
  // The graph reaches the collective.
  void replay(Rank& r, uint32_t plan_slot) { r.view.flags[index(r, plan_slot)].ready.store(1); }
  // The graph's wait: true once irisd wrote done = 1; the graph then writes done = 0.
  bool take_done(Rank& r, uint32_t plan_slot) {
    uint32_t& done = r.done_flags[index(r, plan_slot)];
    if (done != 1) return false;
    done = 0;
    return true;
  }
  std::pair<uint32_t, ErrorCode> status(const Rank& r, uint32_t plan_slot) {
    const uint64_t word = r.view.slots[index(r, plan_slot)].word.load();
    return {static_cast<uint32_t>(word >> 32), shm::completion_code(word)};
  }
  void poll(int times = 20) {
    for (int i = 0; i < times; ++i) loop.poll_once();
  }

  Config config;
  PlainMemoryEngine engine;
  Stats stats;
  ProgressLoop loop{std::chrono::microseconds(0)};
  std::unique_ptr<Runtime> runtime;
  std::deque<Rank> ranks;
  std::vector<int> connections;
  std::vector<std::pair<const RegisteredBuffer*, shm::ShmSegment>> mappings;
};

TEST_F(GraphPlansTest, EveryReplayRunsTheCapturedCollectiveWithConstantFlags) {
  auto [pa, pb] = two_ranks_captured(5, 9);
  Rank& a = *pa;
  Rank& b = *pb;
  map_buffers(a);
  map_buffers(b);
  EXPECT_EQ(stats.graph_plans.load(), 2u);
  // Many replays, new data each time (as kernels in the graph would make): the flags' values
  // never grow, so nothing wraps however long the graph lives.
  for (uint32_t n = 1; n <= 1000; ++n) {
    std::memset(memory(a.send), static_cast<int>(n), kBytes);
    std::memset(memory(b.send), static_cast<int>(n + 100), kBytes);
    replay(a, 5);
    poll(2);
    EXPECT_FALSE(take_done(a, 5)) << "replay " << n << " done before rank 1 came";
    replay(b, 9);
    poll(4);
    ASSERT_TRUE(take_done(a, 5)) << "replay " << n;
    ASSERT_TRUE(take_done(b, 9)) << "replay " << n;
    for (Rank* r : {&a, &b}) {
      const std::byte* recv = memory(r->recv);
      ASSERT_EQ(recv[0], std::byte(n & 0xff)) << "replay " << n;
      ASSERT_EQ(recv[kBytes], std::byte((n + 100) & 0xff)) << "replay " << n;
      EXPECT_EQ(status(*r, r == &a ? 5 : 9), (std::pair{n, ErrorCode::kOk}));
    }
  }
  EXPECT_EQ(stats.graph_replays_total.load(), 2000u);
  // A stale or garbage ready value is no replay.
  a.view.flags[index(a, 5)].ready.store(7);
  poll();
  EXPECT_EQ(stats.graph_replays_total.load(), 2000u);
}

TEST_F(GraphPlansTest, AReleasedGraphFailsTheOtherRanksReplaysInsteadOfHangingThem) {
  auto [pa, pb] = two_ranks_captured(0, 0);
  Rank& a = *pa;
  Rank& b = *pb;
  replay(a, 0);
  poll();
  runtime->release_graph_plan(b.attached.session_id, 0);  // b's graph destroyed
  poll();
  ASSERT_TRUE(take_done(a, 0)) << "the waiting replay must end";
  EXPECT_EQ(status(a, 0).second, ErrorCode::kPeerLost);
  replay(a, 0);  // and every later one ends at once
  poll();
  ASSERT_TRUE(take_done(a, 0));
  EXPECT_EQ(status(a, 0), (std::pair{2u, ErrorCode::kPeerLost}));
  EXPECT_EQ(stats.graph_plans.load(), 1u);
  runtime->release_graph_plan(a.attached.session_id, 0);
  EXPECT_EQ(stats.graph_plans.load(), 0u);
}

TEST_F(GraphPlansTest, ARankThatNeverReplaysTimesTheReplayOut) {
  auto [pa, pb] = two_ranks_captured(3, 3);
  Rank& a = *pa;
  Rank& b = *pb;
  replay(a, 3);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!take_done(a, 3) && std::chrono::steady_clock::now() < give_up) poll(1);
  EXPECT_EQ(status(a, 3).second, ErrorCode::kTimeout);
  replay(b, 3);  // too late: the graph collective is over for every rank
  poll();
  ASSERT_TRUE(take_done(b, 3));
  EXPECT_EQ(status(b, 3).second, ErrorCode::kTimeout);
}

TEST_F(GraphPlansTest, ADeadRankFailsThePlanAndItsSessionTakesItsPlans) {
  auto [pa, pb] = two_ranks_captured(1, 1);
  Rank& a = *pa;
  Rank& b = *pb;
  runtime->end_session(b.attached.session_id, true);
  ::close(b.peer);
  ranks.pop_back();
  EXPECT_EQ(stats.graph_plans.load(), 1u);
  replay(a, 1);
  poll();
  ASSERT_TRUE(take_done(a, 1));
  EXPECT_EQ(status(a, 1).second, ErrorCode::kPeerLost);
}

TEST_F(GraphPlansTest, PlansAreMatchedByCaptureOrderAndRecapturedAfterRelease) {
  Rank& a = join(0, 2);
  Rank& b = join(1, 2);
  map_buffers(a);
  map_buffers(b);
  // Destroyed and captured again many times: nothing accumulates.
  for (int round = 0; round < 100; ++round) {
    runtime->register_graph_plan(a.attached.session_id, all_gather(a), 2);
    runtime->register_graph_plan(b.attached.session_id, all_gather(b), 7);
    std::memset(memory(a.send), round, kBytes);
    replay(a, 2);
    replay(b, 7);
    poll();
    ASSERT_TRUE(take_done(a, 2) && take_done(b, 7)) << "round " << round;
    ASSERT_EQ(status(b, 7).second, ErrorCode::kOk) << "round " << round;
    ASSERT_EQ(memory(b.recv)[0], std::byte(round));
    runtime->release_graph_plan(a.attached.session_id, 2);
    runtime->release_graph_plan(b.attached.session_id, 7);
  }
  EXPECT_EQ(stats.graph_plans.load(), 0u);
  // Finished groups are swept every 100 ms of polling.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!runtime->graph_plans().idle() && std::chrono::steady_clock::now() < give_up) {
    poll(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(runtime->graph_plans().idle()) << "groups left behind";
}

// Sends and receives captured into graphs meet per channel in capture order, whatever the
// collectives captured between them; a destroyed receive fails its own channel only.
TEST_F(GraphPlansTest, SendsAndReceivesMeetPerChannelInCaptureOrder) {
  constexpr uint64_t kPart = kBytes / 3;
  Rank& a = join(0, 3);
  Rank& b = join(1, 3);
  Rank& c = join(2, 3);
  for (Rank* r : {&a, &b, &c}) map_buffers(*r);
  auto capture = [&](Rank& r, const shm::SubmitEntry& e, uint32_t slot) {
    runtime->register_graph_plan(r.attached.session_id, e, slot);
  };
  // Rank 0: an all-gather, its first part to rank 2, its second to rank 1, its third to itself.
  capture(a, all_gather(a), 0);
  capture(a, point_to_point(a, shm::Opcode::kSend, 2, 0, kPart), 1);
  capture(a, point_to_point(a, shm::Opcode::kSend, 1, kPart, kPart), 2);
  capture(a, point_to_point(a, shm::Opcode::kSend, 0, 2 * kPart, kPart), 3);
  capture(a, point_to_point(a, shm::Opcode::kRecv, 0, 2 * kPart, kPart), 4);
  // Ranks 1 and 2 capture their receives before their all-gathers.
  capture(b, point_to_point(b, shm::Opcode::kRecv, 0, 0, kPart), 0);
  capture(b, all_gather(b), 1);
  capture(c, point_to_point(c, shm::Opcode::kRecv, 0, kPart, kPart), 0);
  capture(c, all_gather(c), 1);
  EXPECT_EQ(stats.graph_plans.load(), 9u);
  auto fill = [&](int round) {
    for (uint64_t i = 0; i < kBytes; ++i) memory(a.send)[i] = std::byte((i + round) & 0xff);
    for (Rank* r : {&a, &b, &c}) std::memset(memory(r->recv), 0xee, 3 * kBytes);
  };
  auto sent = [&](uint64_t at) { return memory(a.send)[at]; };
  for (int round = 0; round < 20; ++round) {
    fill(round);
    for (uint32_t slot : {1, 2, 3, 4}) replay(a, slot);
    replay(b, 0);
    replay(c, 0);
    poll();
    for (uint32_t slot : {1, 2, 3, 4}) ASSERT_TRUE(take_done(a, slot)) << round << " " << slot;
    ASSERT_TRUE(take_done(b, 0) && take_done(c, 0)) << "round " << round;
    for (uint64_t i = 0; i < kPart; ++i) {
      ASSERT_EQ(memory(c.recv)[kPart + i], sent(i)) << "rank 2, byte " << i;
      ASSERT_EQ(memory(b.recv)[i], sent(kPart + i)) << "rank 1, byte " << i;
      ASSERT_EQ(memory(a.recv)[2 * kPart + i], sent(2 * kPart + i)) << "rank 0, byte " << i;
    }
    EXPECT_EQ(status(b, 0), (std::pair{uint32_t(round + 1), ErrorCode::kOk}));
    // The all-gathers, captured at other positions, still meet each other.
    replay(a, 0);
    replay(b, 1);
    replay(c, 1);
    poll();
    ASSERT_TRUE(take_done(a, 0) && take_done(b, 1) && take_done(c, 1)) << "round " << round;
    EXPECT_EQ(memory(c.recv)[5], sent(5));
  }
  runtime->release_graph_plan(c.attached.session_id, 0);  // rank 2's receiving graph destroyed
  replay(a, 1);
  replay(a, 2);
  replay(b, 0);
  poll();
  ASSERT_TRUE(take_done(a, 1) && take_done(a, 2) && take_done(b, 0));
  EXPECT_EQ(status(a, 1).second, ErrorCode::kPeerLost);
  EXPECT_EQ(status(a, 2).second, ErrorCode::kOk);
  EXPECT_EQ(status(b, 0).second, ErrorCode::kOk);
}

TEST_F(GraphPlansTest, BadCapturesAreRefusedWithAReason) {
  Rank& a = join(0, 1);
  const uint64_t id = a.attached.session_id;
  auto code_of = [&](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return e.code();
    }
    return ErrorCode::kOk;
  };
  EXPECT_EQ(code_of([&] { runtime->register_graph_plan(id, all_gather(a), shm::kGraphPlanSlots); }),
            ErrorCode::kInvalidArgument);
  auto host_waited = all_gather(a);
  host_waited.flags = 0;
  EXPECT_EQ(code_of([&] { runtime->register_graph_plan(id, host_waited, 0); }),
            ErrorCode::kInvalidArgument);
  auto too_big = all_gather(a);
  too_big.bytes = kBytes * 2;
  EXPECT_EQ(code_of([&] { runtime->register_graph_plan(id, too_big, 0); }), ErrorCode::kOutOfRange);
  auto foreign = all_gather(a);
  foreign.comm_id = 12345;
  EXPECT_EQ(code_of([&] { runtime->register_graph_plan(id, foreign, 0); }), ErrorCode::kNotFound);
  auto no_such_peer = point_to_point(a, shm::Opcode::kSend, 1, 0, kBytes);
  EXPECT_EQ(code_of([&] { runtime->register_graph_plan(id, no_such_peer, 0); }),
            ErrorCode::kInvalidArgument);
  auto barrier = all_gather(a);
  barrier.opcode = static_cast<uint32_t>(shm::Opcode::kBarrier);
  EXPECT_EQ(code_of([&] { runtime->register_graph_plan(id, barrier, 0); }),
            ErrorCode::kInvalidArgument);
  runtime->register_graph_plan(id, all_gather(a), 0);
  EXPECT_EQ(code_of([&] { runtime->register_graph_plan(id, all_gather(a), 0); }),
            ErrorCode::kAlreadyExists);
  EXPECT_EQ(code_of([&] { runtime->release_graph_plan(id, 1); }), ErrorCode::kNotFound);
  EXPECT_EQ(stats.graph_plans.load(), 1u);
}

// Every progress-loop pass looks at every plan: one user cannot pile up plans that slow it for
// everyone.
TEST_F(GraphPlansTest, OneUserHoldsAtMostItsQuotaOfPlans) {
  runtime.reset();
  config.limits.max_graph_plans_per_uid = 2;
  runtime = std::make_unique<Runtime>(config, engine, stats, loop);
  Rank& a = join(0, 1);
  const uint64_t id = a.attached.session_id;
  runtime->register_graph_plan(id, all_gather(a), 0);
  runtime->register_graph_plan(id, all_gather(a), 1);
  try {
    runtime->register_graph_plan(id, all_gather(a), 2);
    ADD_FAILURE() << "a third plan was accepted over a quota of 2";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kLimitExceeded);
    EXPECT_NE(e.message().find("max_graph_plans_per_uid"), std::string::npos) << e.message();
  }
  runtime->release_graph_plan(id, 0);
  runtime->register_graph_plan(id, all_gather(a), 2);  // room again
  EXPECT_EQ(stats.graph_plans.load(), 2u);
}

}  // namespace
}  // namespace iris::daemon
