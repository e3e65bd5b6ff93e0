// The communicator's operation timeout (CommOptions::op_timeout, the torch group's timeout):
// NCCL's watchdog in irisd. Through a real irisd (host engine), with ranks that never call.
#include <gtest/gtest.h>

#include <string>

#include "iris/iris.hpp"
#include "tests/support/client_helpers.hpp"
#include "tests/support/daemon_process.hpp"

namespace iris::testing {
namespace {

using namespace std::chrono_literals;

struct Ranks {
  std::vector<Client> clients;
  std::vector<Communicator> comms;
  std::vector<Buffer> send, recv;
};

// `n` ranks of communicator `key`, each made with `timeouts[r]` (rank 0 first: it creates it).
Ranks join(const DaemonProcess& daemon, const std::string& key,
           const std::vector<std::chrono::milliseconds>& timeouts) {
  Ranks ranks;
  const uint32_t n = timeouts.size();
  for (uint32_t r = 0; r < n; ++r) {
    ranks.clients.push_back(Client::connect(options_for(daemon, key + std::to_string(r))));
    ranks.comms.push_back(
        Communicator::init(ranks.clients[r], key, n, r, CommOptions{timeouts[r]}));
    ranks.send.push_back(ranks.clients[r].allocate(64));
    ranks.recv.push_back(ranks.clients[r].allocate(64 * n));
  }
  return ranks;
}

// An all-gather of 64 bytes called by ranks [0, count) of `t`.
std::vector<Request> gather(Ranks& t, uint32_t count) {
  std::vector<Request> called;
  for (uint32_t r = 0; r < count; ++r)
    called.push_back(t.comms[r].all_gather(t.send[r].data(), t.recv[r].data(), 64));
  return called;
}

TEST(Watchdog, ACollectiveARankNeverCallsBreaksTheCommunicatorNamingTheRank) {
  DaemonProcess daemon;
  Ranks t = join(daemon, "stuck", {300ms, 300ms, 300ms});
  std::vector<Request> called = gather(t, 2);
  for (Request& request : called) {
    const Ending end = ending_of(request, 30s);
    EXPECT_EQ(end.code, ErrorCode::kTimeout) << end.why;
    EXPECT_NE(end.why.find("for rank 2 (2 of 3 arrived)"), std::string::npos) << end.why;
    EXPECT_NE(end.why.find("watchdog"), std::string::npos) << end.why;
  }
  // Broken on every rank: the late rank's call and every later one fail with the same reason.
  Request late = t.comms[2].all_gather(t.send[2].data(), t.recv[2].data(), 64);
  EXPECT_EQ(ending_of(late, 30s).code, ErrorCode::kTimeout);
  Request next = t.comms[0].all_gather(t.send[0].data(), t.recv[0].data(), 64);
  EXPECT_EQ(ending_of(next, 30s).code, ErrorCode::kTimeout);
  // Other communicators go on (a timeout no loaded machine comes near).
  Ranks others = join(daemon, "fine", {60s, 60s});
  for (Request& request : gather(others, 2))
    EXPECT_EQ(ending_of(request, 30s).code, ErrorCode::kOk);
}

TEST(Watchdog, AReceiveNobodyMatchesFailsAtTheCommunicatorsTimeout) {
  DaemonProcess daemon;  // irisd's own --p2p-timeout-ms is 5 minutes
  Ranks t = join(daemon, "quiet", {300ms, 300ms});
  Request lonely = t.comms[1].recv(t.recv[1].data(), 64, 0);
  const Ending end = ending_of(lonely, 30s);
  EXPECT_EQ(end.code, ErrorCode::kTimeout) << end.why;
  EXPECT_NE(end.why.find("within 300 ms (the communicator's timeout)"), std::string::npos)
      << end.why;
  // Only that receive failed: the communicator works.
  Request send = t.comms[0].send(t.send[0].data(), 64, 1);
  Request recv = t.comms[1].recv(t.recv[1].data(), 64, 0);
  EXPECT_EQ(ending_of(send, 30s).code, ErrorCode::kOk);
  EXPECT_EQ(ending_of(recv, 30s).code, ErrorCode::kOk);
}

TEST(Watchdog, WithoutATimeoutACollectiveWaitsAndTheCreatorsChoiceHolds) {
  DaemonProcess daemon;
  // Rank 0 creates it without a timeout; rank 1's 100 ms is not used.
  Ranks t = join(daemon, "patient", {0ms, 100ms, 0ms});
  std::vector<Request> called = gather(t, 2);
  for (Request& request : called) EXPECT_EQ(ending_of(request, 1s).why, "still waiting");
  // The last rank comes: it completes.
  Request last = t.comms[2].all_gather(t.send[2].data(), t.recv[2].data(), 64);
  called.push_back(std::move(last));
  for (Request& request : called) EXPECT_EQ(ending_of(request, 30s).code, ErrorCode::kOk);
}

TEST(Watchdog, ANegativeTimeoutIsRefused) {
  DaemonProcess daemon;
  Client client = Client::connect(options_for(daemon, "negative"));
  EXPECT_EQ(code_of([&] { Communicator::init(client, "negative", 2, 0, CommOptions{-5ms}); }),
            ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace iris::testing
