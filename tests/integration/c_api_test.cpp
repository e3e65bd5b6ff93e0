// libiris's C interface and the Python binding over it, against a real irisd: data lands where
// ncclAllGather semantics put it, and failures come back as codes with messages.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "iris/error_code.hpp"
#include "iris/iris.h"
#include "tests/support/daemon_process.hpp"

namespace iris::testing {
namespace {

struct Rank {
  iris_client* client = nullptr;
  iris_comm* comm = nullptr;
  iris_buffer* send = nullptr;
  iris_buffer* recv = nullptr;
  ~Rank() {
    iris_buffer_release(send);
    iris_buffer_release(recv);
    iris_comm_destroy(comm);
    iris_client_release(client);
  }
};

void join(Rank& r, const DaemonProcess& daemon, const char* key, uint32_t nranks, uint32_t rank,
          size_t bytes) {
  ASSERT_EQ(iris_connect(daemon.socket().c_str(), "c-api-test", &r.client), IRIS_OK)
      << iris_last_error();
  ASSERT_EQ(iris_comm_init(r.client, key, nranks, rank, &r.comm), IRIS_OK) << iris_last_error();
  ASSERT_EQ(iris_allocate(r.client, bytes, &r.send), IRIS_OK) << iris_last_error();
  ASSERT_EQ(iris_allocate(r.client, bytes * nranks, &r.recv), IRIS_OK) << iris_last_error();
  ASSERT_EQ(iris_buffer_size(r.recv), bytes * nranks);
}

TEST(CApi, TwoRanksGatherEachOthersBytes) {
  DaemonProcess daemon;
  constexpr size_t kBytes = 100'003;  // odd on purpose
  Rank ranks[2];
  for (uint32_t r = 0; r < 2; ++r) join(ranks[r], daemon, "c-api", 2, r, kBytes);
  ASSERT_STREQ(iris_client_engine(ranks[0].client), "host");
  for (uint32_t r = 0; r < 2; ++r) {
    auto* send = static_cast<unsigned char*>(iris_buffer_data(ranks[r].send));
    for (size_t i = 0; i < kBytes; ++i) send[i] = static_cast<unsigned char>(i * 7 + r * 131);
    std::memset(iris_buffer_data(ranks[r].recv), 0xee, kBytes * 2);
  }
  iris_request* requests[2] = {};
  for (uint32_t r = 0; r < 2; ++r)
    ASSERT_EQ(iris_all_gather(ranks[r].comm, iris_buffer_data(ranks[r].send),
                              iris_buffer_data(ranks[r].recv), kBytes, nullptr, &requests[r]),
              IRIS_OK)
        << iris_last_error();
  for (uint32_t r = 0; r < 2; ++r) {
    EXPECT_EQ(iris_request_wait(requests[r], 10'000'000'000), IRIS_OK) << iris_last_error();
    int done = 0;
    EXPECT_EQ(iris_request_test(requests[r], &done), IRIS_OK);
    EXPECT_EQ(done, 1);
    iris_request_release(requests[r]);
  }
  for (uint32_t r = 0; r < 2; ++r) {
    const auto* recv = static_cast<const unsigned char*>(iris_buffer_data(ranks[r].recv));
    for (uint32_t from = 0; from < 2; ++from)
      for (size_t i = 0; i < kBytes; ++i)
        ASSERT_EQ(recv[from * kBytes + i], static_cast<unsigned char>(i * 7 + from * 131))
            << "rank " << r << " block " << from << " byte " << i;
  }
}

TEST(CApi, FailuresComeBackAsCodesWithMessages) {
  DaemonProcess daemon;
  Rank ranks[2];
  for (uint32_t r = 0; r < 2; ++r) join(ranks[r], daemon, "c-api-errors", 2, r, 64);

  iris_request* request = nullptr;
  int stack_bytes[16] = {};
  EXPECT_EQ(iris_all_gather(ranks[0].comm, stack_bytes, iris_buffer_data(ranks[0].recv), 64,
                            nullptr, &request),
            static_cast<int>(ErrorCode::kNotFound));
  EXPECT_NE(std::string(iris_last_error()).find("send pointer"), std::string::npos)
      << iris_last_error();
  EXPECT_EQ(request, nullptr);
  EXPECT_EQ(iris_all_gather(nullptr, nullptr, nullptr, 0, nullptr, &request),
            IRIS_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(iris_error_name(static_cast<int>(ErrorCode::kPeerLost)), "peer_lost");
  EXPECT_STREQ(iris_error_name(-1), "unknown");

  // Rank 1 never joins this collective: a bounded wait runs out, and rank 1 leaving fails it.
  ASSERT_EQ(iris_all_gather(ranks[0].comm, iris_buffer_data(ranks[0].send),
                            iris_buffer_data(ranks[0].recv), 64, nullptr, &request),
            IRIS_OK)
      << iris_last_error();
  EXPECT_EQ(iris_request_wait(request, 20'000'000), IRIS_ERROR_TIMEOUT);
  EXPECT_EQ(iris_comm_destroy(ranks[1].comm), IRIS_OK) << iris_last_error();
  ranks[1].comm = nullptr;
  EXPECT_EQ(iris_request_wait(request, 10'000'000'000), static_cast<int>(ErrorCode::kPeerLost))
      << iris_last_error();
  iris_request_release(request);

  iris_client* nobody = nullptr;
  EXPECT_EQ(iris_connect((daemon.directory() + "/no-such.sock").c_str(), nullptr, &nobody),
            IRIS_ERROR_UNAVAILABLE);
  EXPECT_EQ(nobody, nullptr);
}

TEST(PythonBinding, GathersAndRaisesIrisError) {
  DaemonProcess daemon;
  const ProgramResult result =
      run_program({"/usr/bin/env", std::string("IRIS_LIBRARY=") + IRIS_TEST_LIBIRIS,
                   std::string("PYTHONPATH=") + IRIS_TEST_SOURCE_DIR + "/client/python", "python3",
                   std::string(IRIS_TEST_SOURCE_DIR) + "/tests/integration/python_client_check.py",
                   "--socket", daemon.socket()});
  EXPECT_EQ(result.exit_code, 0) << result.output << "\ndaemon log:\n" << daemon.log();
  EXPECT_NE(result.output.find("python binding: ok"), std::string::npos) << result.output;
}

}  // namespace
}  // namespace iris::testing
