// The session's parts against a fake link (no irisd): what each one's resume step presents to the
// next irisd, and that a result answered by an irisd gone since is never recorded.
#include <gtest/gtest.h>

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

#include "client/src/captured_plans.hpp"
#include "client/src/communicators.hpp"
#include "client/src/registrations.hpp"
#include "client/src/submissions.hpp"
#include "tests/support/code_of.hpp"
#include "tests/unit/fake_gpu_runtime.hpp"
#include "tests/unit/fake_session_link.hpp"

namespace iris {
namespace {

using testing::FakeSessionLink;

std::shared_ptr<const net::Fd> memfd(std::size_t bytes) {
  net::Fd fd(::memfd_create("session-parts-test", MFD_CLOEXEC));
  EXPECT_EQ(::ftruncate(fd.get(), static_cast<off_t>(bytes)), 0);
  return std::make_shared<const net::Fd>(std::move(fd));
}

TEST(Registrations, AResumeHandsOverTheHostMemoryStillRegisteredUnderItsIds) {
  FakeSessionLink link;
  Registrations registrations(link);
  std::vector<std::byte> a(4096), b(8192), c(100);
  ASSERT_TRUE(registrations.record(11, link.connection, a.data(), a.size(), false, memfd(4096)));
  ASSERT_TRUE(registrations.record(12, link.connection, b.data(), b.size(), false, memfd(8192)));
  ASSERT_TRUE(registrations.record(13, link.connection, c.data(), c.size(), false, memfd(100)));
  registrations.forget(12, b.data());  // freed on this irisd, not carried
  ASSERT_EQ(link.calls_named("free buffer").size(), 1u);
  EXPECT_EQ(link.calls_named("free buffer")[0].request.deregister().buffer_id(), 12u);

  link.restart();
  registrations.resume();
  const auto adopted = link.calls_named("resume a host buffer");
  ASSERT_EQ(adopted.size(), 2u);
  std::map<uint64_t, uint64_t> bytes_of;
  for (const auto& call : adopted) {
    EXPECT_TRUE(call.resume);
    EXPECT_EQ(call.fds, 1u) << "host memory goes over as its descriptor";
    bytes_of[call.request.adopt_host().buffer_id()] = call.request.adopt_host().bytes();
  }
  EXPECT_EQ(bytes_of, (std::map<uint64_t, uint64_t>{{11, 4096}, {13, 100}}));
  // Still found where they were.
  const auto found = registrations.locate({a.data() + 10, c.data()});
  ASSERT_TRUE(found[0] && found[1]);
  EXPECT_EQ(found[0]->buffer_id, 11u);
  EXPECT_EQ(found[0]->offset, 10u);
  EXPECT_EQ(found[0]->available, 4086u);
  EXPECT_EQ(found[1]->buffer_id, 13u);
  EXPECT_FALSE(registrations.locate({b.data(), nullptr})[0]) << "a forgotten buffer was found";
}

TEST(Registrations, AnAnswerFromAnIrisdGoneSinceIsNotRecorded) {
  FakeSessionLink link;
  Registrations registrations(link);
  std::vector<std::byte> a(64);
  const uint64_t answered_on = link.connection;
  link.restart();  // the resume read the table before this registration was recorded
  EXPECT_FALSE(registrations.record(5, answered_on, a.data(), a.size(), false));
  EXPECT_FALSE(registrations.locate({a.data(), nullptr})[0]);
  // Freeing on an irisd that is gone sends nothing (that irisd took the buffer with it).
  registrations.deregister(5, answered_on);
  EXPECT_TRUE(link.calls_named("free buffer").empty());
}

TEST(Registrations, TheDoneFlagsAreRegisteredAgainOnEveryResume) {
  FakeSessionLink link;
  Registrations registrations(link);
  v1::SessionRequest flags;
  flags.mutable_register_ipc()->set_stream_done_flags(true);
  registrations.register_done_flags(flags);
  for (int restart = 0; restart < 2; ++restart) {
    link.restart();
    registrations.resume();
  }
  const auto again = link.calls_named("register stream done flags again");
  ASSERT_EQ(again.size(), 2u);
  EXPECT_TRUE(again[1].request.register_ipc().stream_done_flags());
  EXPECT_EQ(again[1].connection, 2u);
}

TEST(Communicators, AResumeJoinsEachLiveCommunicatorWhereItStood) {
  FakeSessionLink link;
  Communicators comms(link);
  v1::SessionRequest init;
  init.mutable_comm_init()->set_op_timeout_ms(2500);
  auto kept = comms.join(init, "kept", 4, 1);
  v1::SessionRequest other;
  auto destroyed = comms.join(other, "destroyed", 2, 0);
  ASSERT_EQ(kept->id.load(), 101u);
  EXPECT_EQ(kept->resume_secret, "secret-101");
  comms.destroy(*destroyed);
  ASSERT_EQ(link.calls_named("communicator destroy").size(), 1u);
  EXPECT_EQ(link.calls_named("communicator destroy")[0].request.comm_destroy().comm_id(), 102u);

  // Collectives 1-6 submitted, 3 and 5 unfinished; sends to rank 2 posted up to 4, the 2nd open.
  kept->next_seq = 7;
  kept->p2p_posted[{true, 2}] = 4;
  const uint64_t left = link.connection;
  link.restart();
  const auto ids = comms.resume([&](uint64_t comm_id) {
    EXPECT_EQ(comm_id, 101u);
    UnfinishedRequests open;
    open.collectives = {3, 5};
    open.point_to_point[{true, 2}] = {2};
    return open;
  });
  ASSERT_EQ(ids.size(), 1u) << "a destroyed communicator was carried";
  const auto resumed = link.calls_named("resume a communicator");
  ASSERT_EQ(resumed.size(), 1u);
  const v1::CommInitRequest& again = resumed[0].request.comm_init();
  EXPECT_EQ(again.key(), "kept");
  EXPECT_EQ(again.nranks(), 4u);
  EXPECT_EQ(again.rank(), 1u);
  EXPECT_EQ(again.op_timeout_ms(), 2500u);
  EXPECT_EQ(again.comm_secret(), "secret-101");
  EXPECT_EQ(again.resume_seq(), 3u);
  EXPECT_EQ(std::vector<uint64_t>(again.completed_seqs().begin(), again.completed_seqs().end()),
            (std::vector<uint64_t>{4, 6}));
  ASSERT_EQ(again.p2p_progress_size(), 1);
  EXPECT_TRUE(again.p2p_progress(0).send());
  EXPECT_EQ(again.p2p_progress(0).peer(), 2u);
  EXPECT_EQ(again.p2p_progress(0).done_below(), 2u);
  EXPECT_EQ(std::vector<uint64_t>(again.p2p_progress(0).done_after().begin(),
                                  again.p2p_progress(0).done_after().end()),
            (std::vector<uint64_t>{3, 4}));
  // Nothing changes until carry(): an attempt that failed leaves the ids as they were.
  EXPECT_EQ(kept->id.load(), 101u);
  comms.carry(ids, left, link.connection);
  EXPECT_EQ(kept->id.load(), ids.at(101));
  EXPECT_EQ(comms.id_and_connection(*kept).second, link.connection);
  EXPECT_EQ(kept->resume_secret, "secret-" + std::to_string(ids.at(101)));
}

TEST(Communicators, ACallNamingACommunicatorGoesOnlyToTheIrisdItsIdIsFrom) {
  FakeSessionLink link;
  Communicators comms(link);
  v1::SessionRequest init;
  auto comm = comms.join(init, "c", 2, 0);
  // irisd restarted and the resume has not carried it yet: the call waits for the carry, and a
  // communicator destroyed before any resume read it is carried nowhere.
  link.restart();
  comm->destroyed = true;
  const auto answer = comms.call_naming(
      *comm, [](v1::SessionRequest& r, uint64_t id) { r.mutable_comm_destroy()->set_comm_id(id); },
      "communicator destroy");
  EXPECT_FALSE(answer);
  EXPECT_TRUE(link.calls_named("communicator destroy").empty())
      << "an old id went to an irisd that never gave it";
}

// A session segment in this process's memory, as irisd lays it out, with the parts that read it:
// submissions and graph plans over a fake link (no irisd; the test plays irisd's part by writing
// completion words and popping the ring).
struct SessionParts : ::testing::Test {
  static constexpr uint32_t kDepth = 8;
  SessionParts()
      : layout(*shm::SegmentLayout::for_depth(kDepth)),
        memory(static_cast<std::byte*>(std::aligned_alloc(4096, layout.total_bytes)), &std::free) {
    std::memset(memory.get(), 0, layout.total_bytes);
    shm::initialize_segment(memory.get(), layout, 1);
    view = shm::SegmentView::at(memory.get(), layout);
    flags = std::make_unique<StreamFlagsMapping>(
        memory.get(), layout.total_bytes, view.flags, view.slot_count(),
        [](const v1::RegisterIpcBuffer&) {},
        [](GpuVendor v) -> std::unique_ptr<GpuRuntime> {
          return std::make_unique<FakeGpuRuntime>(v, true);
        });
    submissions = std::make_unique<Submissions>(view, link, registrations, *flags,
                                                std::chrono::microseconds(0));
    plans = std::make_unique<CapturedPlans>(view, link, comms, *submissions, *flags,
                                            std::chrono::seconds(1));
  }
  // Submits an entry of `comm` (a collective, or a send to `peer`) and returns its slot.
  uint32_t submit(CommRank& comm, shm::Opcode opcode, uint32_t peer = 0) {
    uint32_t generation = 0;
    const uint32_t slot =
        submissions->acquire_slot(deadline_after(std::chrono::seconds(1)), nullptr, &generation);
    shm::SubmitEntry entry{};
    entry.opcode = static_cast<uint32_t>(opcode);
    entry.slot = slot;
    entry.generation = generation;
    entry.root = peer;
    submissions->push(entry, &comm, opcode != shm::Opcode::kSend, slot,
                      deadline_after(std::chrono::seconds(1)));
    generations[slot] = generation;
    return slot;
  }
  // irisd completes the request in `slot`.
  void complete(uint32_t slot, ErrorCode code = ErrorCode::kOk) {
    view.slots[slot].word.store(shm::pack_completion(generations[slot], code));
  }
  // What irisd finds in the ring, in order.
  std::vector<shm::SubmitEntry> pop_all() {
    shm::RingConsumer<shm::SubmitEntry> ring(view.ring_control, view.ring_entries, kDepth);
    std::vector<shm::SubmitEntry> out;
    shm::SubmitEntry e{};
    while (ring.try_pop(e) == shm::PopResult::kEntry) out.push_back(e);
    return out;
  }

  FakeSessionLink link;
  Registrations registrations{link};
  Communicators comms{link};
  shm::SegmentLayout layout;
  std::unique_ptr<std::byte, decltype(&std::free)> memory;
  shm::SegmentView view;
  std::unique_ptr<StreamFlagsMapping> flags;
  std::unique_ptr<Submissions> submissions;
  std::unique_ptr<CapturedPlans> plans;
  std::map<uint32_t, uint32_t> generations;
};

TEST_F(SessionParts, AResumeSubmitsTheUnfinishedAgainInOrderUnderTheNewIds) {
  v1::SessionRequest init;
  auto comm = comms.join(init, "c", 2, 0);
  v1::SessionRequest other_init;
  auto gone = comms.join(other_init, "gone", 2, 0);
  const uint32_t first = submit(*comm, shm::Opcode::kAllGather);   // seq 1
  const uint32_t send = submit(*comm, shm::Opcode::kSend, 1);      // send 1 to rank 1
  const uint32_t second = submit(*comm, shm::Opcode::kAllGather);  // seq 2
  const uint32_t orphan = submit(*gone, shm::Opcode::kBroadcast);  // its comm will not resume
  const uint32_t third = submit(*comm, shm::Opcode::kAllToAll);    // seq 3
  ASSERT_EQ(pop_all().size(), 5u);
  complete(first);
  complete(second);

  // irisd restarts: the resume empties the ring and asks what is unfinished.
  auto ring = submissions->hold_ring();
  const UnfinishedRequests open = submissions->unfinished(comm->id.load());
  EXPECT_EQ(open.collectives, (std::set<uint64_t>{3}));
  ASSERT_EQ(open.point_to_point.size(), 1u);
  EXPECT_EQ(open.point_to_point.begin()->first, std::make_pair(true, 1u));
  EXPECT_EQ(open.point_to_point.begin()->second, (std::set<uint64_t>{1}));
  submissions->resubmit({{comm->id.load(), 900}});
  ring.unlock();

  const auto again = pop_all();
  ASSERT_EQ(again.size(), 2u) << "only the unfinished of a resumed communicator go in again";
  EXPECT_EQ(again[0].slot, send) << "in the order they were first pushed";
  EXPECT_EQ(again[1].slot, third);
  for (const auto& e : again) {
    EXPECT_EQ(e.comm_id, 900u);
    EXPECT_NE(e.flags & shm::kResubmitted, 0u);
  }
  EXPECT_EQ(again[1].seq, 3u);
  // The orphan failed here, with the reason, and its waiter sees it.
  EXPECT_EQ(submissions->wait(orphan, generations[orphan], deadline_after(std::chrono::seconds(1))),
            ErrorCode::kDaemonGone);
  EXPECT_NE(submissions->failure_text(orphan).find("communicator was destroyed"),
            std::string::npos);
  EXPECT_FALSE(submissions->poll(third, generations[third]));
}

TEST_F(SessionParts, AResumeRegistersTheGraphPlansAgainInTheirOrderAndLosesOnlyTheRefused) {
  v1::SessionRequest init;
  auto comm = comms.join(init, "g", 2, 1);
  shm::SubmitEntry entry{};
  entry.opcode = static_cast<uint32_t>(shm::Opcode::kAllGather);
  const uint32_t a = plans->take_slot();
  const uint32_t b = plans->take_slot();
  entry.bytes = 64;
  plans->add(b, entry, *comm, {});  // registered first, though its slot is the second
  entry.bytes = 128;
  plans->add(a, entry, *comm, {});
  ASSERT_EQ(link.calls_named("capture a collective into a CUDA graph").size(), 2u);
  // irisd completed 5 replays of plan b.
  view.slots[plans->flag_index(b)].word.store(shm::pack_completion(5, ErrorCode::kOk));

  link.restart();
  // The next irisd refuses plan a (memory it names was freed since the capture).
  link.answer = [&, ok = link.answer](const v1::SessionRequest& r) {
    if (r.has_register_plan() && r.register_plan().plan_slot() == a)
      throw Error(ErrorCode::kNotFound, "buffer 7 is not registered");
    return ok(r);
  };
  const uint64_t old_id = comm->id.load();
  EXPECT_TRUE(plans->resume({{old_id, 555}}));
  const auto again = link.calls_named("register a CUDA graph's collective again");
  ASSERT_EQ(again.size(), 2u);
  shm::SubmitEntry sent{};
  std::memcpy(&sent, again[0].request.register_plan().entry().data(), sizeof(sent));
  EXPECT_EQ(again[0].request.register_plan().plan_slot(), b) << "not in registration order";
  EXPECT_EQ(sent.comm_id, 555u);
  EXPECT_EQ(sent.bytes, 64u);
  EXPECT_EQ(again[0].request.register_plan().completed_replays(), 5u);
  EXPECT_TRUE(again[0].request.register_plan().resumed());
  // The lost plan alone fails, at check(), with irisd's reason and what to do.
  const auto lost = testing::error_of([&] { plans->check(); });
  ASSERT_TRUE(lost) << "check() did not report the lost plan";
  EXPECT_EQ(lost->code(), ErrorCode::kNotFound);
  EXPECT_NE(std::string(lost->what()).find("buffer 7 is not registered"), std::string::npos);
  EXPECT_NE(std::string(lost->what()).find("capture it again"), std::string::npos);
  EXPECT_TRUE(plans->release_lost());
  plans->release(a);  // its graph destroyed
  EXPECT_FALSE(plans->release_lost()) << "no lost plan is left to tend";
}

TEST_F(SessionParts, PlanSlotsRunOutWithAClearErrorAndComeBackWhenReleased) {
  std::vector<uint32_t> taken;
  for (uint32_t i = 0; i < shm::kGraphPlanSlots; ++i) taken.push_back(plans->take_slot());
  const auto refused = testing::error_of([&] { plans->take_slot(); });
  ASSERT_TRUE(refused) << "a plan slot past the last";
  EXPECT_EQ(refused->code(), ErrorCode::kLimitExceeded);
  EXPECT_NE(std::string(refused->what()).find("destroy some graphs"), std::string::npos);
  plans->release(taken[17]);
  EXPECT_EQ(plans->take_slot(), taken[17]);
}

}  // namespace
}  // namespace iris
