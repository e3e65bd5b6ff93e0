// The session's parts against a fake link (no irisd): what each one's resume step presents to the
// next irisd, and that a result answered by an irisd gone since is never recorded.
#include <gtest/gtest.h>

#include <sys/mman.h>

#include "client/src/communicators.hpp"
#include "client/src/registrations.hpp"
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

}  // namespace
}  // namespace iris
