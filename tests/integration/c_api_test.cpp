// libiris's C interface and the Python binding over it, against a real irisd: data lands where
// ncclAllGather semantics put it, and failures come back as codes with messages.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
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

// Submits on both ranks, waits for both; every call must succeed.
template <typename Submit>
void run_both(Rank (&ranks)[2], Submit&& submit) {
  iris_request* requests[2] = {};
  for (uint32_t r = 0; r < 2; ++r)
    ASSERT_EQ(submit(ranks[r], r, &requests[r]), IRIS_OK) << iris_last_error();
  for (iris_request* request : requests) {
    EXPECT_EQ(iris_request_wait(request, 10'000'000'000), IRIS_OK) << iris_last_error();
    iris_request_release(request);
  }
}

TEST(CApi, EveryCollective) {
  DaemonProcess daemon;
  constexpr size_t kBytes = 1001;
  Rank ranks[2];
  for (uint32_t r = 0; r < 2; ++r) join(ranks[r], daemon, "c-api-all", 2, r, 2 * kBytes);
  auto send = [&](uint32_t r) {
    return static_cast<unsigned char*>(iris_buffer_data(ranks[r].send));
  };
  auto recv = [&](uint32_t r) {
    return static_cast<unsigned char*>(iris_buffer_data(ranks[r].recv));
  };
  auto reset = [&] {
    for (uint32_t r = 0; r < 2; ++r) {
      for (size_t i = 0; i < 2 * kBytes; ++i)
        send(r)[i] = static_cast<unsigned char>(i * 3 + r * 101);
      std::memset(recv(r), 0xee, 4 * kBytes);
    }
  };
  auto sent = [](uint32_t r, size_t i) { return static_cast<unsigned char>(i * 3 + r * 101); };

  reset();  // all-to-all: block j of rank r lands as block r of rank j
  run_both(ranks, [&](Rank& k, uint32_t r, iris_request** out) {
    return iris_all_to_all(k.comm, send(r), recv(r), kBytes, nullptr, out);
  });
  for (uint32_t r = 0; r < 2; ++r)
    for (uint32_t from = 0; from < 2; ++from)
      for (size_t i = 0; i < kBytes; ++i)
        ASSERT_EQ(recv(r)[from * kBytes + i], sent(from, r * kBytes + i)) << r << " " << from;

  reset();  // all-to-all-v: rank 0 sends 10 bytes to rank 1, rank 1 sends 20 to rank 0
  const uint64_t counts[2][2] = {{5, 10}, {20, 7}};
  run_both(ranks, [&](Rank& k, uint32_t r, iris_request** out) {
    const uint64_t send_counts[2] = {counts[r][0], counts[r][1]};
    const uint64_t recv_counts[2] = {counts[0][r], counts[1][r]};
    const uint64_t send_displs[2] = {0, 100};
    const uint64_t recv_displs[2] = {200, 0};
    return iris_all_to_all_v(k.comm, send(r), send_counts, send_displs, recv(r), recv_counts,
                             recv_displs, nullptr, out);
  });
  // Rank s's block lands at recv_displs[s]: from rank 0 at 200, from rank 1 at 0.
  EXPECT_EQ(recv(1)[200], sent(0, 100));  // rank 0's block for rank 1 started at 100
  EXPECT_EQ(recv(1)[209], sent(0, 109));
  EXPECT_EQ(recv(1)[210], 0xee);
  EXPECT_EQ(recv(1)[6], sent(1, 106));  // its own 7 bytes
  EXPECT_EQ(recv(1)[7], 0xee);
  EXPECT_EQ(recv(0)[19], sent(1, 19));
  EXPECT_EQ(recv(0)[20], 0xee);
  EXPECT_EQ(recv(0)[204], sent(0, 4));

  reset();  // broadcast from rank 1, gather and scatter at rank 0
  run_both(ranks, [&](Rank& k, uint32_t r, iris_request** out) {
    return iris_broadcast(k.comm, send(r), kBytes, 1, nullptr, out);
  });
  EXPECT_EQ(std::memcmp(send(0), send(1), kBytes), 0);
  reset();
  run_both(ranks, [&](Rank& k, uint32_t r, iris_request** out) {
    return iris_gather(k.comm, send(r), r == 0 ? recv(r) : nullptr, kBytes, 0, nullptr, out);
  });
  EXPECT_EQ(recv(0)[kBytes + 5], sent(1, 5));
  EXPECT_EQ(recv(1)[0], 0xee) << "a non-root receives nothing";
  reset();
  run_both(ranks, [&](Rank& k, uint32_t r, iris_request** out) {
    return iris_scatter(k.comm, r == 0 ? send(r) : nullptr, recv(r), kBytes, 0, nullptr, out);
  });
  EXPECT_EQ(recv(1)[5], sent(0, kBytes + 5));
  EXPECT_EQ(recv(0)[5], sent(0, 5));

  iris_request* request = nullptr;
  const iris_stream bogus{nullptr, 9};
  EXPECT_EQ(iris_all_to_all(ranks[0].comm, send(0), recv(0), 8, &bogus, &request),
            IRIS_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(iris_last_error()).find("iris_stream kind"), std::string::npos);
  const iris_stream legacy{nullptr, IRIS_STREAM_CUDA};
  EXPECT_EQ(iris_broadcast(ranks[0].comm, send(0), 8, 0, &legacy, &request),
            IRIS_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(iris_last_error()).find("legacy default stream"), std::string::npos);
}

// iris_connect_with carries what iris::ClientOptions sets: a client with a resume window of 0
// fails at once when irisd dies (irisd's own window, 60 s, would make it wait); a struct of
// another size is refused with the reason.
TEST(CApi, ClientOptionsTakeEffect) {
  DaemonProcess daemon;
  iris_client_options older{sizeof(uint32_t) + sizeof(int64_t), -1, 0, -1, -1};
  iris_client* refused = nullptr;
  EXPECT_EQ(iris_connect_with(daemon.socket().c_str(), "older", &older, &refused),
            IRIS_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(iris_last_error()).find("struct_size"), std::string::npos)
      << iris_last_error();
  EXPECT_EQ(refused, nullptr);
  Rank r;
  iris_client_options options{sizeof(iris_client_options), -1, 0, 0, -1};
  ASSERT_EQ(iris_connect_with(daemon.socket().c_str(), "no-window", &options, &r.client), IRIS_OK)
      << iris_last_error();
  ASSERT_EQ(iris_comm_init(r.client, "options", 2, 0, &r.comm), IRIS_OK) << iris_last_error();
  ASSERT_EQ(iris_allocate(r.client, 64, &r.send), IRIS_OK) << iris_last_error();
  ASSERT_EQ(iris_allocate(r.client, 128, &r.recv), IRIS_OK) << iris_last_error();
  iris_request* pending = nullptr;  // rank 1 never comes
  ASSERT_EQ(iris_all_gather(r.comm, iris_buffer_data(r.send), iris_buffer_data(r.recv), 64, nullptr,
                            &pending),
            IRIS_OK)
      << iris_last_error();
  daemon.kill();
  EXPECT_EQ(iris_request_wait(pending, 10'000'000'000), IRIS_ERROR_DAEMON_GONE)
      << iris_last_error();
  iris_request_release(pending);
}

TEST(CApi, ErrorCodesMatchTheCppList) {
  // iris.h spells each code out for C; both lists must agree, name for name.
  const std::pair<int, const char*> c_codes[] = {
      {IRIS_OK, "ok"},
      {IRIS_ERROR_INVALID_ARGUMENT, "invalid_argument"},
      {IRIS_ERROR_NOT_FOUND, "not_found"},
      {IRIS_ERROR_OUT_OF_RANGE, "out_of_range"},
      {IRIS_ERROR_PERMISSION_DENIED, "permission_denied"},
      {IRIS_ERROR_ALREADY_EXISTS, "already_exists"},
      {IRIS_ERROR_SIZE_MISMATCH, "size_mismatch"},
      {IRIS_ERROR_SEQUENCE_ERROR, "sequence_error"},
      {IRIS_ERROR_NRANKS_MISMATCH, "nranks_mismatch"},
      {IRIS_ERROR_PEER_LOST, "peer_lost"},
      {IRIS_ERROR_LIMIT_EXCEEDED, "limit_exceeded"},
      {IRIS_ERROR_BUSY, "busy"},
      {IRIS_ERROR_TIMEOUT, "timeout"},
      {IRIS_ERROR_DAEMON_GONE, "daemon_gone"},
      {IRIS_ERROR_PROTOCOL_MISMATCH, "protocol_mismatch"},
      {IRIS_ERROR_UNAVAILABLE, "unavailable"},
      {IRIS_ERROR_INTERNAL, "internal"},
      {IRIS_ERROR_ENGINE_ERROR, "engine_error"},
      {IRIS_ERROR_CANCELLED, "cancelled"},
  };
  ASSERT_EQ(std::size(c_codes), kErrorCodeCount);
  for (const auto& [code, name] : c_codes) {
    EXPECT_EQ(to_string(static_cast<ErrorCode>(code)), name);
    EXPECT_STREQ(iris_error_name(code), name);
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

// iris_share: rank 1 sends from memory rank 0's client allocated, registered with its own
// session too; both gather it. Null arguments are refused by name.
TEST(CApi, ShareRegistersAnotherClientsBufferForItsSession) {
  DaemonProcess daemon;
  Rank ranks[2];
  for (uint32_t r = 0; r < 2; ++r) join(ranks[r], daemon, "c-api-share", 2, r, 64);
  iris_buffer* source = nullptr;
  ASSERT_EQ(iris_allocate(ranks[0].client, 64, &source), IRIS_OK) << iris_last_error();
  std::memset(iris_buffer_data(source), 0x6b, 64);
  std::memset(iris_buffer_data(ranks[0].send), 0x17, 64);
  iris_buffer* shared = nullptr;
  ASSERT_EQ(iris_share(ranks[1].client, source, &shared), IRIS_OK) << iris_last_error();
  EXPECT_EQ(iris_buffer_data(shared), iris_buffer_data(source));
  EXPECT_EQ(iris_buffer_size(shared), 64u);
  iris_request* requests[2] = {};
  ASSERT_EQ(iris_all_gather(ranks[0].comm, iris_buffer_data(ranks[0].send),
                            iris_buffer_data(ranks[0].recv), 64, nullptr, &requests[0]),
            IRIS_OK)
      << iris_last_error();
  ASSERT_EQ(iris_all_gather(ranks[1].comm, iris_buffer_data(shared),
                            iris_buffer_data(ranks[1].recv), 64, nullptr, &requests[1]),
            IRIS_OK)
      << iris_last_error();
  for (iris_request* request : requests) {
    EXPECT_EQ(iris_request_wait(request, 10'000'000'000), IRIS_OK) << iris_last_error();
    iris_request_release(request);
  }
  for (const Rank& r : ranks) {
    const auto* got = static_cast<const unsigned char*>(iris_buffer_data(r.recv));
    EXPECT_EQ(got[0], 0x17);
    EXPECT_EQ(got[127], 0x6b);
  }
  iris_buffer* none = nullptr;
  EXPECT_EQ(iris_share(ranks[1].client, nullptr, &none), IRIS_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(iris_last_error()).find("other"), std::string::npos) << iris_last_error();
  EXPECT_EQ(iris_share(ranks[0].client, source, &none), IRIS_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(none, nullptr);
  iris_buffer_release(shared);
  iris_buffer_release(source);
}

// iris_request_wait_all waits for every request, also past a failed one, and returns the first
// failure by position with its message.
TEST(CApi, WaitAllWaitsForEveryRequestAndReturnsTheFirstFailure) {
  DaemonProcess daemon;
  Rank ranks[2];
  for (uint32_t r = 0; r < 2; ++r) join(ranks[r], daemon, "c-api-wait-all", 2, r, 64);
  // Per rank: a good all-gather, one whose sizes disagree (64 against 32 bytes), a good one.
  iris_request* requests[2][3] = {};
  for (uint32_t r = 0; r < 2; ++r)
    for (uint32_t i = 0; i < 3; ++i)
      ASSERT_EQ(iris_all_gather(ranks[r].comm, iris_buffer_data(ranks[r].send),
                                iris_buffer_data(ranks[r].recv), i == 1 && r == 1 ? 32 : 64,
                                nullptr, &requests[r][i]),
                IRIS_OK)
          << iris_last_error();
  for (uint32_t r = 0; r < 2; ++r) {
    EXPECT_EQ(iris_request_wait_all(requests[r], 3), static_cast<int>(ErrorCode::kSizeMismatch));
    EXPECT_NE(std::string(iris_last_error()).find("64"), std::string::npos) << iris_last_error();
    int done = 0;
    EXPECT_EQ(iris_request_test(requests[r][2], &done), IRIS_OK) << iris_last_error();
    EXPECT_EQ(done, 1) << "wait_all returned before the request after the failed one completed";
    for (iris_request* request : requests[r]) iris_request_release(request);
  }
  EXPECT_EQ(iris_request_wait_all(nullptr, 0), IRIS_OK);
  EXPECT_EQ(iris_request_wait_all(nullptr, 2), IRIS_ERROR_INVALID_ARGUMENT);
}

// `python` running a script of tests/integration with libiris and the binding on its path.
// Sanitizer builds (scripts/sanitize.sh): python3 is not instrumented, so the sanitizer runtime
// must be loaded before libiris; its leak check would report the interpreter's own.
ProgramResult run_python_check(const std::string& python, const std::string& script,
                               const std::vector<std::string>& args) {
  std::vector<std::string> argv = {
      "/usr/bin/env", std::string("IRIS_LIBRARY=") + IRIS_TEST_LIBIRIS,
      std::string("PYTHONPATH=") + IRIS_TEST_SOURCE_DIR + "/client/python"};
  if (const char* preload = std::getenv("IRIS_TEST_PRELOAD"))
    argv.insert(argv.end(), {std::string("LD_PRELOAD=") + preload, "ASAN_OPTIONS=detect_leaks=0"});
  argv.insert(argv.end(),
              {python, std::string(IRIS_TEST_SOURCE_DIR) + "/tests/integration/" + script});
  argv.insert(argv.end(), args.begin(), args.end());
  return run_program(argv);
}

TEST(PythonBinding, GathersAndRaisesIrisError) {
  DaemonProcess daemon;
  const ProgramResult result =
      run_python_check("python3", "python_client_check.py", {"--socket", daemon.socket()});
  EXPECT_EQ(result.exit_code, 0) << result.output << "\ndaemon log:\n" << daemon.log();
  EXPECT_NE(result.output.find("python binding: ok"), std::string::npos) << result.output;
}

// The binding's waits while irisd is SIGKILLed (the script kills it): daemon_gone, no hang.
TEST(PythonBinding, NoticesThatIrisdDied) {
  DaemonProcess daemon({"--resume-window-ms", "0"});  // clients do not wait for it to come back
  // Debian's python3: its torch (1.13, CPU) checks the torch backend's barrier too.
  const ProgramResult result =
      run_python_check("/usr/bin/python3", "python_daemon_gone_check.py",
                       {"--socket", daemon.socket(), "--daemon-pid", std::to_string(daemon.pid())});
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("python daemon gone: ok"), std::string::npos) << result.output;
  std::printf("%s", result.output.c_str());
}

// A communicator across two daemons through the C interface: the node addresses, the join with
// the nodes and secret, and an all-gather whose blocks cross between the daemons.
TEST(CApi, CommunicatorAcrossTwoDaemons) {
  DaemonProcess nodes[2];
  Rank ranks[2];
  std::vector<std::string> addresses;
  for (int n = 0; n < 2; ++n) {
    ASSERT_EQ(iris_connect(nodes[n].socket().c_str(), "c-api-nodes", &ranks[n].client), IRIS_OK);
    size_t bytes = 0;
    ASSERT_EQ(iris_node_address(ranks[n].client, nullptr, &bytes), IRIS_OK) << iris_last_error();
    std::string address(bytes, '\0');
    size_t small = bytes - 1;
    EXPECT_EQ(iris_node_address(ranks[n].client, address.data(), &small), IRIS_ERROR_OUT_OF_RANGE);
    ASSERT_EQ(iris_node_address(ranks[n].client, address.data(), &bytes), IRIS_OK);
    addresses.push_back(address);
  }
  const void* pointers[2] = {addresses[0].data(), addresses[1].data()};
  const size_t lengths[2] = {addresses[0].size(), addresses[1].size()};
  const uint32_t node_of_rank[2] = {0, 1};
  const std::string secret = "c-api-test-secret-0123456789";
  constexpr size_t kBytes = 100003;
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      Rank& me = ranks[r];
      ASSERT_EQ(iris_comm_init_nodes(me.client, "c-api-nodes", 2, r, pointers, lengths, 2,
                                     node_of_rank, secret.data(), secret.size(), 20000, &me.comm),
                IRIS_OK)
          << iris_last_error();
      ASSERT_EQ(iris_allocate(me.client, kBytes, &me.send), IRIS_OK);
      ASSERT_EQ(iris_allocate(me.client, 2 * kBytes, &me.recv), IRIS_OK);
      std::memset(iris_buffer_data(me.send), 0x30 + static_cast<int>(r), kBytes);
      iris_request* request = nullptr;
      ASSERT_EQ(iris_all_gather(me.comm, iris_buffer_data(me.send), iris_buffer_data(me.recv),
                                kBytes, nullptr, &request),
                IRIS_OK)
          << iris_last_error();
      EXPECT_EQ(iris_request_wait(request, -1), IRIS_OK) << iris_last_error();
      iris_request_release(request);
    });
  }
  for (auto& t : threads) t.join();
  for (uint32_t r = 0; r < 2; ++r) {
    const auto* got = static_cast<const unsigned char*>(iris_buffer_data(ranks[r].recv));
    for (size_t i = 0; i < 2 * kBytes; ++i)
      ASSERT_EQ(got[i], 0x30 + i / kBytes) << "rank " << r << " byte " << i;
  }
}

// Runs a torch check script (tests/integration) with Debian's python3 against `sockets` (comma
// separated) and expects `ok_line` in its output. torch does not load under the preloaded
// sanitizer runtime: those builds skip, the plain build runs it; exit 77 (no torch) skips too.
void expect_torch_script(const std::string& script, const std::string& socket_flag,
                         const std::string& sockets, const std::string& ok_line,
                         const std::function<std::string()>& logs) {
  if (std::getenv("IRIS_TEST_PRELOAD") != nullptr)
    GTEST_SKIP() << "torch does not load under the preloaded sanitizer runtime; the plain build "
                    "runs this test";
  const ProgramResult result = run_program(
      {"/usr/bin/env", std::string("IRIS_LIBRARY=") + IRIS_TEST_LIBIRIS,
       std::string("PYTHONPATH=") + IRIS_TEST_SOURCE_DIR + "/client/python", "/usr/bin/python3",
       std::string(IRIS_TEST_SOURCE_DIR) + "/tests/integration/" + script, socket_flag, sockets});
  if (result.exit_code == 77) GTEST_SKIP() << result.output;
  EXPECT_EQ(result.exit_code, 0) << result.output << logs();
  EXPECT_NE(result.output.find(ok_line), std::string::npos) << result.output;
}

// Debian 12's torch (1.13, CPU only) against a real irisd: the backend registers, two rank
// processes form a group, CPU tensors go through its gloo and barriers through irisd. The CUDA
// paths run on the GPU host (tests/python/gpu).
TEST(PythonTorchBackend, FormsAGroupThroughIrisd) {
  DaemonProcess daemon;
  expect_torch_script("python_torch_check.py", "--socket", daemon.socket(), "torch backend: ok",
                      [&] { return daemon.log(); });
}

// The same group with each rank on its own irisd: the backend finds the two daemons through the
// store and makes a communicator across them (barriers through both daemons).
TEST(PythonTorchBackend, FormsAGroupAcrossTwoDaemons) {
  DaemonProcess nodes[2];
  expect_torch_script("python_torch_check.py", "--socket",
                      nodes[0].socket() + "," + nodes[1].socket(), "torch backend: ok",
                      [&] { return nodes[0].log() + nodes[1].log(); });
}

// The plain binding across two daemons, bootstrapped through torch's TCPStore with the helper in
// examples/multi_node.
TEST(PythonScaleOut, TwoDaemonsThroughTheStoreBootstrap) {
  DaemonProcess nodes[2];
  expect_torch_script("python_scale_out_check.py", "--sockets",
                      nodes[0].socket() + "," + nodes[1].socket(), "python scale-out: ok",
                      [&] { return nodes[0].log() + nodes[1].log(); });
}

}  // namespace
}  // namespace iris::testing
