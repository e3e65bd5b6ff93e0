// Point to point through a real irisd (host engine): every pairing, self included, odd sizes,
// many in flight on two communicators, groups, and what goes wrong (sizes that differ, a peer
// out of range, a receive nobody matches, a peer that dies). Ranks are clients of this process,
// each its own session, unless a test needs a rank it can kill.
#include <signal.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "iris/iris.hpp"
#include "tests/support/client_helpers.hpp"
#include "tests/support/ctl_json.hpp"
#include "tests/support/daemon_process.hpp"
#include "tests/support/raw_session.hpp"

namespace iris::testing {
namespace {

using namespace std::chrono_literals;

ErrorCode wait_code(Request& r, std::chrono::nanoseconds timeout = 30s) {
  try {
    if (!r.wait(timeout)) return ErrorCode::kTimeout;
  } catch (const Error& e) {
    return e.code();
  }
  return ErrorCode::kOk;
}

// The byte message `k` from `src` to `dst` carries at `i`: only that message has it.
unsigned char pattern(uint32_t src, uint32_t dst, uint32_t k, uint64_t i) {
  return static_cast<unsigned char>((src * 131 + dst * 31 + k * 7 + i * 13 + (i >> 8)) & 0xff);
}

// `n` ranks of communicator `key`, each a client with its own session.
struct Ranks {
  Ranks(const DaemonProcess& daemon, const std::string& key, uint32_t n) {
    for (uint32_t r = 0; r < n; ++r)
      clients.push_back(Client::connect(options_for(daemon, key + "-" + std::to_string(r))));
    for (uint32_t r = 0; r < n; ++r) comms.push_back(Communicator::init(clients[r], key, n, r));
  }
  std::vector<Client> clients;
  std::vector<Communicator> comms;
};

// One message of a test: its buffers in the sender's and the receiver's sessions.
struct Message {
  uint32_t src, dst, k;
  uint64_t bytes;
  Buffer send, recv;
};

TEST(PointToPoint, EveryPairingSelfIncludedMovesTheRightBytesInOrder) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  DaemonProcess daemon;
  constexpr uint32_t kRanks = 4, kPerPair = 3;
  Ranks ranks(daemon, "pairs", kRanks);
  std::vector<Message> messages;
  for (uint32_t src = 0; src < kRanks; ++src)
    for (uint32_t dst = 0; dst < kRanks; ++dst)
      for (uint32_t k = 0; k < kPerPair; ++k) {
        // Log-uniform odd and even sizes from 1 byte to 256 KiB; 0 bytes now and then.
        const uint64_t bytes = rng() % 9 == 0 ? 0 : (1 + rng() % (uint64_t{1} << (rng() % 19)));
        Message m{src,
                  dst,
                  k,
                  bytes,
                  ranks.clients[src].allocate(bytes + 1),
                  ranks.clients[dst].allocate(bytes + 1)};
        for (uint64_t i = 0; i < bytes; ++i)
          m.send.as<unsigned char>()[i] = pattern(src, dst, k, i);
        std::memset(m.recv.data(), 0xee, bytes + 1);  // poison, and a guard byte past the end
        messages.push_back(std::move(m));
      }
  // Each rank posts its sends and receives in its own random order, except that the k-th
  // message of a pair is posted before the (k+1)-th on both sides (that is what orders them).
  std::vector<std::vector<std::pair<const Message*, bool>>> posts(kRanks);  // (message, is_send)
  for (const Message& m : messages) {
    posts[m.src].push_back({&m, true});
    posts[m.dst].push_back({&m, false});
  }
  std::vector<Request> requests;
  for (uint32_t r = 0; r < kRanks; ++r) {
    auto& mine = posts[r];
    std::shuffle(mine.begin(), mine.end(), rng);
    std::stable_sort(mine.begin(), mine.end(), [](const auto& a, const auto& b) {
      return a.first->k < b.first->k;  // keeps the shuffle within one k
    });
    for (const auto& [m, is_send] : mine)
      requests.push_back(is_send ? ranks.comms[r].send(m->send.data(), m->bytes, m->dst)
                                 : ranks.comms[r].recv(m->recv.data(), m->bytes, m->src));
  }
  for (Request& r : requests) ASSERT_EQ(wait_code(r), ErrorCode::kOk) << daemon.log();
  for (const Message& m : messages) {
    const auto* got = m.recv.as<unsigned char>();
    uint64_t wrong = 0;
    for (uint64_t i = 0; i < m.bytes; ++i) wrong += got[i] != pattern(m.src, m.dst, m.k, i);
    EXPECT_EQ(wrong, 0u) << m.src << "->" << m.dst << " #" << m.k << " (" << m.bytes << " B)";
    EXPECT_EQ(got[m.bytes], 0xee) << "a byte past the receive range was written";
  }
}

TEST(PointToPoint, ManyInFlightOnTwoCommunicatorsMatchInOrder) {
  DaemonProcess daemon;
  auto a = Client::connect(options_for(daemon, "a"));
  auto b = Client::connect(options_for(daemon, "b"));
  Communicator c1a = Communicator::init(a, "one", 2, 0), c1b = Communicator::init(b, "one", 2, 1);
  Communicator c2a = Communicator::init(a, "two", 2, 1), c2b = Communicator::init(b, "two", 2, 0);
  constexpr uint32_t kMessages = 48;  // per direction and communicator: 192 in flight
  constexpr uint64_t kBytes = 4099;
  auto a_send = a.allocate(4 * kMessages * kBytes), a_recv = a.allocate(4 * kMessages * kBytes);
  auto b_send = b.allocate(4 * kMessages * kBytes), b_recv = b.allocate(4 * kMessages * kBytes);
  auto at = [&](Buffer& buf, uint32_t stream, uint32_t k) {
    return buf.as<unsigned char>() + (stream * kMessages + k) * kBytes;
  };
  // Four streams of messages, a tag each: a->b and b->a on both communicators.
  for (uint32_t k = 0; k < kMessages; ++k)
    for (uint64_t i = 0; i < kBytes; ++i) {
      at(a_send, 0, k)[i] = pattern(0, 1, k, i);
      at(a_send, 1, k)[i] = pattern(2, 3, k, i);
      at(b_send, 0, k)[i] = pattern(1, 0, k, i);
      at(b_send, 1, k)[i] = pattern(3, 2, k, i);
    }
  std::vector<Request> requests;
  for (uint32_t k = 0; k < kMessages; ++k) {
    // Receives first on one side, sends first on the other: nothing waits at submission.
    requests.push_back(c1b.recv(at(b_recv, 0, k), kBytes, 0));
    requests.push_back(c2b.recv(at(b_recv, 1, k), kBytes, 1));
    requests.push_back(c1a.send(at(a_send, 0, k), kBytes, 1));
    requests.push_back(c2a.send(at(a_send, 1, k), kBytes, 0));
    requests.push_back(c1b.send(at(b_send, 0, k), kBytes, 0));
    requests.push_back(c2b.send(at(b_send, 1, k), kBytes, 1));
    requests.push_back(c1a.recv(at(a_recv, 0, k), kBytes, 1));
    requests.push_back(c2a.recv(at(a_recv, 1, k), kBytes, 0));
  }
  for (Request& r : requests) ASSERT_EQ(wait_code(r), ErrorCode::kOk) << daemon.log();
  uint64_t wrong = 0;
  for (uint32_t k = 0; k < kMessages; ++k)
    for (uint64_t i = 0; i < kBytes; ++i) {
      wrong += at(b_recv, 0, k)[i] != pattern(0, 1, k, i);
      wrong += at(b_recv, 1, k)[i] != pattern(2, 3, k, i);
      wrong += at(a_recv, 0, k)[i] != pattern(1, 0, k, i);
      wrong += at(a_recv, 1, k)[i] != pattern(3, 2, k, i);
    }
  EXPECT_EQ(wrong, 0u) << "the k-th send must land in the k-th receive of its channel";
}

TEST(PointToPoint, GroupsInEveryOrderNeverDeadlock) {
  // A ring exchange (each rank sends to the next and receives from the previous), posted in
  // every order inside a group, host-blocking: the group changes nothing for these, and no
  // order waits on another rank at submission.
  DaemonProcess daemon;
  constexpr uint32_t kRanks = 3;
  constexpr uint64_t kBytes = 1000;
  Ranks ranks(daemon, "ring", kRanks);
  std::vector<Buffer> send, recv;
  for (uint32_t r = 0; r < kRanks; ++r) {
    send.push_back(ranks.clients[r].allocate(kBytes));
    recv.push_back(ranks.clients[r].allocate(kBytes));
  }
  for (uint32_t order = 0; order < 2 * kRanks; ++order) {
    std::vector<Request> requests;
    for (uint32_t r = 0; r < kRanks; ++r) {
      for (uint64_t i = 0; i < kBytes; ++i)
        send[r].as<unsigned char>()[i] = pattern(r, order, 0, i);
      const uint32_t next = (r + 1) % kRanks, prev = (r + kRanks - 1) % kRanks;
      group_start();
      if ((order >> r) & 1) {
        requests.push_back(ranks.comms[r].recv(recv[r].data(), kBytes, prev));
        requests.push_back(ranks.comms[r].send(send[r].data(), kBytes, next));
      } else {
        requests.push_back(ranks.comms[r].send(send[r].data(), kBytes, next));
        requests.push_back(ranks.comms[r].recv(recv[r].data(), kBytes, prev));
      }
      group_end();
    }
    for (Request& q : requests) ASSERT_EQ(wait_code(q), ErrorCode::kOk) << "order " << order;
    for (uint32_t r = 0; r < kRanks; ++r) {
      const uint32_t prev = (r + kRanks - 1) % kRanks;
      uint64_t wrong = 0;
      for (uint64_t i = 0; i < kBytes; ++i)
        wrong += recv[r].as<unsigned char>()[i] != pattern(prev, order, 0, i);
      EXPECT_EQ(wrong, 0u) << "rank " << r << " order " << order;
    }
  }
  EXPECT_EQ(code_of([] { group_end(); }), ErrorCode::kInvalidArgument);
}

TEST(PointToPoint, SizesThatDifferFailBothSidesNamingBoth) {
  DaemonProcess daemon;
  TwoRanks t(daemon, "sizes", 128);
  auto send = t.ca.send(t.sa.data(), 100, 1);
  auto recv = t.cb.recv(t.rb.data(), 64, 0);
  for (Request* r : {&send, &recv}) {
    try {
      r->wait(30s);
      ADD_FAILURE() << "a send of 100 bytes matched a receive of 64";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kSizeMismatch);
      const std::string what = e.what();
      EXPECT_NE(what.find("100"), std::string::npos) << what;
      EXPECT_NE(what.find("64"), std::string::npos) << what;
    }
  }
  // The channel goes on: the next pair matches each other.
  std::memset(t.sa.data(), 7, 128);
  auto again_send = t.ca.send(t.sa.data(), 128, 1);
  auto again_recv = t.cb.recv(t.rb.data(), 128, 0);
  EXPECT_EQ(wait_code(again_send), ErrorCode::kOk);
  EXPECT_EQ(wait_code(again_recv), ErrorCode::kOk);
  EXPECT_EQ(t.rb.as<unsigned char>()[127], 7);
}

TEST(PointToPoint, APeerOutOfRangeIsRefusedByLibirisAndByIrisd) {
  DaemonProcess daemon;
  TwoRanks t(daemon, "range", 64);
  EXPECT_EQ(code_of([&] { t.ca.send(t.sa.data(), 8, 2); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { t.ca.recv(t.ra.data(), 8, 7); }), ErrorCode::kInvalidArgument);
  // What libiris never sends: irisd refuses it too, and only that request.
  auto raw = RawClient::attach(daemon.socket());
  const uint64_t comm = raw.comm_init("range-raw", 1, 0);
  const auto buf = raw.allocate(64);
  auto entry = shm::collective_entry({shm::Opcode::kSend, comm, buf.id, 0, shm::kNoBuffer, 0, 8});
  entry.root = 1;
  EXPECT_EQ(raw.wait(0, raw.submit(entry)), ErrorCode::kInvalidArgument);
  entry.root = 0;  // to itself, with a receive: fine
  const uint32_t sent = raw.submit(entry, 0);
  auto recv_entry =
      shm::collective_entry({shm::Opcode::kRecv, comm, shm::kNoBuffer, 0, buf.id, 32, 8});
  recv_entry.root = 0;
  const uint32_t received = raw.submit(recv_entry, 1);
  EXPECT_EQ(raw.wait(0, sent), ErrorCode::kOk);
  EXPECT_EQ(raw.wait(1, received), ErrorCode::kOk);
  // The pair's own kind is never a ring opcode.
  auto pair_entry = entry;
  pair_entry.opcode = static_cast<uint32_t>(shm::Opcode::kSendRecv);
  EXPECT_EQ(raw.wait(2, raw.submit(pair_entry, 2)), ErrorCode::kInvalidArgument);
}

// An operator sees the sends and receives waiting for their peer, and whom each waits on, in
// iris-ctl comms and top; a matched pair leaves the list.
TEST(PointToPoint, IrisCtlShowsWaitingSendsAndReceivesAndWhomTheyWaitOn) {
  DaemonProcess daemon;
  TwoRanks t(daemon, "shown", 64);
  auto send = t.ca.send(t.sa.data(), 48, 1);
  auto listed = [&] { return ctl_json(daemon, {"comms"})["point_to_point"]; };
  ASSERT_TRUE(eventually([&] { return listed().size() == 1; })) << listed().dump();
  const auto row = listed()[0];
  EXPECT_EQ(row["op"], "send");
  EXPECT_EQ(row["src"], 0);
  EXPECT_EQ(row["dst"], 1);
  EXPECT_EQ(row["bytes"], 48);
  const std::string waits_on = row["waits_on (rank: session/pid)"];
  EXPECT_EQ(waits_on.rfind("1: ", 0), 0u) << waits_on;
  EXPECT_NE(waits_on.find("/" + std::to_string(::getpid())), std::string::npos) << waits_on;
  const auto top = ctl_json(daemon, {"top", "--interval", "0.05", "--count", "1"})["waiting"];
  ASSERT_EQ(top.size(), 1u) << top.dump();
  EXPECT_EQ(top[0]["collective"], "send 0->1");
  auto recv = t.cb.recv(t.rb.data(), 48, 0);
  EXPECT_EQ(wait_code(send), ErrorCode::kOk);
  EXPECT_EQ(wait_code(recv), ErrorCode::kOk);
  EXPECT_TRUE(listed().empty()) << listed().dump();
}

TEST(PointToPoint, AReceiveNobodyMatchesTimesOutAndHoldsNothing) {
  DaemonProcess daemon({"--p2p-timeout-ms", "300"});
  TwoRanks t(daemon, "lonely", 64);
  auto lonely = t.cb.recv(t.rb.data(), 64, 0);
  try {
    lonely.wait(30s);
    ADD_FAILURE() << "a receive nobody sent to completed";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
    EXPECT_NE(std::string(e.what()).find("--p2p-timeout-ms"), std::string::npos) << e.what();
  }
  // The timed-out receive is gone: a later send meets a later receive.
  std::memset(t.sa.data(), 9, 64);
  auto send = t.ca.send(t.sa.data(), 64, 1);
  auto recv = t.cb.recv(t.rb.data(), 64, 0);
  EXPECT_EQ(wait_code(send), ErrorCode::kOk);
  EXPECT_EQ(wait_code(recv), ErrorCode::kOk);
  EXPECT_EQ(t.rb.as<unsigned char>()[63], 9);
}

TEST(PointToPoint, APeerThatDiesFailsWaitingAndLaterSidesWithPeerLost) {
  DaemonProcess daemon;
  auto client = Client::connect(options_for(daemon, "survivor"));
  auto comm = Communicator::init(client, "dies", 2, 0);
  auto send = client.allocate(4096), recv = client.allocate(8192);
  // The victim joins, submits one all-gather and stops; ours meets it, so the victim is there.
  const pid_t victim = spawn({rank_program_path(), "--socket", daemon.socket(), "--mode", "hang",
                              "--key", "dies", "--nranks", "2", "--rank", "1", "--inflight", "1",
                              "--collective", "all_gather", "--max-bytes", "64"});
  auto gathered = comm.all_gather(send.data(), recv.data(), 0);
  wait_code(gathered);  // it met the victim's (whatever its size): the victim has joined
  auto from_victim = comm.recv(recv.data(), 4096, 1);
  auto to_victim = comm.send(send.data(), 4096, 1);
  ::kill(victim, SIGKILL);
  EXPECT_EQ(wait_for(victim), 128 + SIGKILL);
  EXPECT_EQ(wait_code(from_victim), ErrorCode::kPeerLost);
  EXPECT_EQ(wait_code(to_victim), ErrorCode::kPeerLost);
  auto later = comm.send(send.data(), 16, 1);
  EXPECT_EQ(wait_code(later), ErrorCode::kPeerLost);
}

}  // namespace
}  // namespace iris::testing
