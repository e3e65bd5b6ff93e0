// A rank's waits for other nodes' ranks that another thread gives up on (the stop flag of
// meet_nodes and of Communicator::init with nodes): each ends with cancelled instead of running
// to its timeout, and the daemons serve the next job. irisd's NCCL library sets the flag from
// ncclCommAbort of a non-blocking init.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "iris/iris.hpp"
#include "tests/support/client_helpers.hpp"
#include "tests/support/ctl_json.hpp"
#include "tests/support/daemon_process.hpp"

namespace iris::testing {
namespace {

std::string secret_of(char seed) { return std::string(kMeetingSecretBytes, seed); }

TEST(StoppedWaits, AStopFlagEndsAWaitAtTheMeetingPointWithCancelled) {
  DaemonProcess daemon({"--meeting-address", "127.0.0.1:0"});
  const std::string point = ctl_json(daemon, {"status"})["irisd"]["meeting_point"];
  Client client = Client::connect(options_for(daemon, "waits-alone"));
  std::atomic<bool> stop{false};
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    stop = true;
  });
  // Rank 1 of the job never comes: without the flag this waits out the 10-minute timeout.
  const ErrorCode code = code_of(
      [&] { meet_nodes(client, point, secret_of('a'), 2, 0, std::chrono::minutes(10), &stop); });
  stopper.join();
  EXPECT_EQ(code, ErrorCode::kCancelled);
  // A flag already set ends the wait before it starts.
  const std::atomic<bool> stopped{true};
  EXPECT_EQ(code_of([&] {
              meet_nodes(client, point, secret_of('b'), 2, 0, std::chrono::minutes(10), &stopped);
            }),
            ErrorCode::kCancelled);
  // The meeting point serves the next job.
  const NodeSet met = meet_nodes(client, point, secret_of('c'), 1, 0, std::chrono::seconds(30));
  EXPECT_EQ(met.node_of_rank, std::vector<uint32_t>{0});
}

TEST(StoppedWaits, AStopFlagEndsAnInitWaitingForAnotherNodeWithCancelled) {
  DaemonProcess node0, node1;
  Client client = Client::connect(options_for(node0, "waits-for-node-1"));
  Client other = Client::connect(options_for(node1, "node-1-address"));
  NodeSet nodes;
  const ErrorCode started = code_of([&] {
    nodes.addresses = {client.node_address(), other.node_address()};
  });
  if (started != ErrorCode::kOk) GTEST_SKIP() << "UCX did not start here";
  nodes.node_of_rank = {0, 1};
  nodes.secret = secret_of('d');
  nodes.join_timeout = std::chrono::minutes(10);
  // Rank 1 (on node 1) never comes.
  const std::atomic<bool> stopped{true};
  EXPECT_EQ(code_of([&] { Communicator::init(client, "lonely", 2, 0, nodes, {}, &stopped); }),
            ErrorCode::kCancelled);
  EXPECT_EQ(node0.ended(), std::nullopt) << node0.log();
  // The daemon serves the next job: a collective on a communicator of this client.
  Communicator alone = Communicator::init(client, "alone", 1, 0);
  Buffer send = client.allocate(64), recv = client.allocate(64);
  std::memset(send.data(), 0x5a, 64);
  std::memset(recv.data(), 0, 64);
  ASSERT_TRUE(alone.all_gather(send.data(), recv.data(), 64).wait(std::chrono::seconds(30)));
  EXPECT_EQ(std::memcmp(send.data(), recv.data(), 64), 0);
}

}  // namespace
}  // namespace iris::testing
