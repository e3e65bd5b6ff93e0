// Bad input and faults against a real irisd: each gets a clear error code, the daemon survives,
// and nothing else is lost or corrupted.
#include <signal.h>
#include <unistd.h>

#include <fcntl.h>
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <thread>

#include "examples/collective_sweep/pattern.hpp"
#include "iris/iris.hpp"
#include "iris/shared/version.hpp"
#include "tests/support/client_helpers.hpp"
#include "tests/support/daemon_process.hpp"
#include "tests/support/raw_session.hpp"

namespace iris::testing {
namespace {

using namespace std::chrono_literals;

// A raw all-gather entry for tests that need what libiris itself never sends.
shm::SubmitEntry raw_gather(uint64_t comm, uint64_t seq, uint64_t send_buffer, uint64_t send_off,
                            uint64_t recv_buffer, uint64_t recv_off, uint64_t bytes) {
  auto e = shm::collective_entry(
      {shm::Opcode::kAllGather, comm, send_buffer, send_off, recv_buffer, recv_off, bytes});
  e.seq = seq;
  return e;
}

ErrorCode wait_code(Request& r, std::chrono::nanoseconds timeout = 10s) {
  try {
    if (!r.wait(timeout)) return ErrorCode::kTimeout;
  } catch (const Error& e) {
    return e.code();
  }
  return ErrorCode::kOk;
}

class Faults : public ::testing::Test {
 protected:
  // Clients fail at once when irisd goes (resume_test.cpp has those that wait for it).
  DaemonProcess daemon{{"--resume-window-ms", "0"}};
};

TEST_F(Faults, BadRingEntriesFailOnlyThemselves) {
  auto client = RawClient::attach(daemon.socket());
  const uint64_t comm = client.comm_init("solo", 1, 0);
  const auto buf = client.allocate(4096);
  const auto recv = client.allocate(4096);
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  struct Case {
    const char* what;
    shm::SubmitEntry entry;
    ErrorCode expected;
  };
  const Case cases[] = {
      {"unknown buffer", raw_gather(comm, 1, 424242, 0, recv.id, 0, 8), ErrorCode::kNotFound},
      {"send past end", raw_gather(comm, 2, buf.id, 4000, recv.id, 0, 97), ErrorCode::kOutOfRange},
      {"recv past end", raw_gather(comm, 3, buf.id, 0, recv.id, 1, 4096), ErrorCode::kOutOfRange},
      {"offset overflows 64 bits", raw_gather(comm, 4, buf.id, max, recv.id, 0, 2),
       ErrorCode::kOutOfRange},
      {"unknown communicator", raw_gather(777, 1, buf.id, 0, recv.id, 0, 8), ErrorCode::kNotFound},
      {"sequence skipped", raw_gather(comm, 9, buf.id, 0, recv.id, 0, 8),
       ErrorCode::kSequenceError},
      {"sequence reused", raw_gather(comm, 1, buf.id, 0, recv.id, 0, 8), ErrorCode::kSequenceError},
  };
  for (const Case& c : cases)
    EXPECT_EQ(client.wait(0, client.submit(c.entry)), c.expected) << c.what;
  shm::SubmitEntry bad_opcode{};
  bad_opcode.opcode = 77;
  EXPECT_EQ(client.wait(0, client.submit(bad_opcode)), ErrorCode::kInvalidArgument);

  // Stream-ordered without registered done flags: nothing the stream waits on could be written.
  auto stream_entry = raw_gather(comm, 5, buf.id, 0, recv.id, 0, 8);
  stream_entry.flags = shm::kStreamOrdered;
  EXPECT_EQ(client.wait(0, client.submit(stream_entry)), ErrorCode::kInvalidArgument);

  // The session and the daemon still work: seq 6 is next (1-5 were consumed above).
  example::fill_block(buf.data, 4096, 5, 0, 0);
  EXPECT_EQ(client.wait(0, client.submit(raw_gather(comm, 6, buf.id, 0, recv.id, 0, 4096))),
            ErrorCode::kOk);
  EXPECT_EQ(example::check_block(recv.data, 4096, 5, 0, 0), 4096u);
}

TEST_F(Faults, ClientSideChecksNamePointersOutsideBuffers) {
  auto client = Client::connect(options_for(daemon));
  auto comm = Communicator::init(client, "k", 2, 0);
  auto buf = client.allocate(1024);
  std::vector<char> not_registered(64);
  EXPECT_EQ(code_of([&] { comm.all_gather(not_registered.data(), buf.data(), 8); }),
            ErrorCode::kNotFound);
  EXPECT_EQ(code_of([&] { comm.all_gather(buf.data(), buf.as<char>() + 1000, 16); }),
            ErrorCode::kOutOfRange);
  EXPECT_EQ(code_of([&] {
              comm.all_gather(buf.data(), buf.data(),
                              std::numeric_limits<std::size_t>::max() / 2 + 1);
            }),
            ErrorCode::kOutOfRange);
}

TEST_F(Faults, BytesDifferingBetweenRanksFailsEveryRank) {
  TwoRanks pair(daemon, "mismatch", 1 << 20);
  auto& [a, b, ca, cb, sa, ra, sb, rb] = pair;
  auto r0 = ca.all_gather(sa.data(), ra.data(), 1000);
  auto r1 = cb.all_gather(sb.data(), rb.data(), 1001);
  EXPECT_EQ(wait_code(r0), ErrorCode::kSizeMismatch);
  EXPECT_EQ(wait_code(r1), ErrorCode::kSizeMismatch);
  // The next collective on the same communicator works.
  example::fill_block(sa.data(), 1 << 20, 3, 0, 0);
  example::fill_block(sb.data(), 1 << 20, 3, 1, 0);
  auto n0 = ca.all_gather(sa.data(), ra.data(), 1 << 20);
  auto n1 = cb.all_gather(sb.data(), rb.data(), 1 << 20);
  EXPECT_EQ(wait_code(n0), ErrorCode::kOk);
  EXPECT_EQ(wait_code(n1), ErrorCode::kOk);
  for (uint32_t r = 0; r < 2; ++r) {
    EXPECT_EQ(example::check_block(ra.as<char>() + r * (1 << 20), 1 << 20, 3, r, 0), 1u << 20);
    EXPECT_EQ(example::check_block(rb.as<char>() + r * (1 << 20), 1 << 20, 3, r, 0), 1u << 20);
  }
}

TEST_F(Faults, CommInitErrors) {
  auto a = Client::connect(options_for(daemon, "a"));
  auto b = Client::connect(options_for(daemon, "b"));
  auto ca = Communicator::init(a, "ci", 4, 0);
  EXPECT_EQ(code_of([&] { Communicator::init(b, "ci", 4, 4); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { Communicator::init(b, "ci", 4, 0); }), ErrorCode::kAlreadyExists);
  EXPECT_EQ(code_of([&] { Communicator::init(b, "ci", 3, 1); }), ErrorCode::kNranksMismatch);
  EXPECT_EQ(code_of([&] { Communicator::init(a, "ci", 4, 1); }), ErrorCode::kAlreadyExists);
  EXPECT_EQ(code_of([&] { Communicator::init(b, "", 4, 1); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { Communicator::init(b, "zero", 0, 0); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { Communicator::init(b, "ci", 4, 1); }), ErrorCode::kOk);
}

TEST_F(Faults, RegisterBufferErrors) {
  auto client = Client::connect(options_for(daemon));
  EXPECT_EQ(code_of([&] { client.allocate(0); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { client.allocate(uint64_t{1} << 50); }), ErrorCode::kLimitExceeded);
}

TEST(FaultsRing, FullRingIsBackPressureNotLoss) {
  DaemonProcess daemon({"--ring-depth", "4"});
  auto o = options_for(daemon, "a");
  o.submit_timeout = 0ns;
  auto a = Client::connect(o);
  auto b = Client::connect(options_for(daemon, "b"));
  auto ca = Communicator::init(a, "full", 2, 0);
  auto cb = Communicator::init(b, "full", 2, 1);
  constexpr uint64_t kBytes = 4096;
  auto sa = a.allocate(kBytes * 4), ra = a.allocate(2 * kBytes * 4);
  auto sb = b.allocate(kBytes * 4), rb = b.allocate(2 * kBytes * 4);
  std::vector<Request> ra_reqs;
  for (uint64_t i = 0; i < 4; ++i) {
    example::fill_block(sa.as<char>() + i * kBytes, kBytes, 11, 0, i);
    ra_reqs.push_back(
        ca.all_gather(sa.as<char>() + i * kBytes, ra.as<char>() + 2 * i * kBytes, kBytes));
  }
  // Rank 1 has not submitted: all 4 slots are in flight, the 5th is refused, not queued or lost.
  EXPECT_EQ(code_of([&] { ca.all_gather(sa.data(), ra.data(), kBytes); }), ErrorCode::kBusy);
  std::vector<Request> rb_reqs;
  for (uint64_t i = 0; i < 4; ++i) {
    example::fill_block(sb.as<char>() + i * kBytes, kBytes, 11, 1, i);
    rb_reqs.push_back(
        cb.all_gather(sb.as<char>() + i * kBytes, rb.as<char>() + 2 * i * kBytes, kBytes));
  }
  for (uint64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(wait_code(ra_reqs[i]), ErrorCode::kOk);
    EXPECT_EQ(wait_code(rb_reqs[i]), ErrorCode::kOk);
    for (uint32_t r = 0; r < 2; ++r) {
      EXPECT_EQ(example::check_block(ra.as<char>() + (2 * i + r) * kBytes, kBytes, 11, r, i),
                kBytes);
      EXPECT_EQ(example::check_block(rb.as<char>() + (2 * i + r) * kBytes, kBytes, 11, r, i),
                kBytes);
    }
  }
}

// Requests kept without waiting do not hold their completion slots for ever: once irisd
// completed them, the next call takes their slots back, and each Request still reports its own
// result, the daemon's reason for a failure included.
TEST(FaultsRing, UnwaitedCompletedRequestsDoNotBlockLaterCalls) {
  DaemonProcess daemon({"--ring-depth", "4"});
  TwoRanks pair(daemon, "unwaited", 4096);
  auto& [a, b, ca, cb, sa, ra, sb, rb] = pair;
  std::vector<Request> kept_a, kept_b;
  for (int i = 0; i < 12; ++i) {  // three times the ring depth, none waited
    const std::size_t bytes_b = i % 3 == 0 ? 2048 : 4096;  // every third disagrees
    kept_a.push_back(ca.all_gather(sa.data(), ra.data(), 4096));
    kept_b.push_back(cb.all_gather(sb.data(), rb.data(), bytes_b));
  }
  for (int i = 0; i < 12; ++i) {
    const ErrorCode expected = i % 3 == 0 ? ErrorCode::kSizeMismatch : ErrorCode::kOk;
    for (Request* r : {&kept_a[i], &kept_b[i]}) {
      try {
        r->wait();
        EXPECT_EQ(expected, ErrorCode::kOk) << "request " << i << " succeeded";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), expected) << "request " << i << ": " << e.what();
        // The daemon's own words, kept when the slot was taken back.
        EXPECT_NE(std::string(e.what()).find("2048"), std::string::npos) << e.what();
      }
    }
  }
  // Dropped Requests give their slots back too.
  for (int i = 0; i < 12; ++i) {
    ca.all_gather(sa.data(), ra.data(), 4096);
    cb.all_gather(sb.data(), rb.data(), 4096);
  }
  auto last_a = ca.all_gather(sa.data(), ra.data(), 4096);
  auto last_b = cb.all_gather(sb.data(), rb.data(), 4096);
  EXPECT_EQ(wait_code(last_a), ErrorCode::kOk);
  EXPECT_EQ(wait_code(last_b), ErrorCode::kOk);
}

TEST_F(Faults, CorruptRingIndicesEndOnlyThatSession) {
  auto bad = RawClient::attach(daemon.socket(), "bad");
  auto good = Client::connect(options_for(daemon, "good"));
  bad.ring.view.ring_control->tail.store(1'000'000, std::memory_order_release);
  ::write(bad.session.fds[0].get(), "\1\0\0\0\0\0\0\0", 8);
  // The daemon ends the bad session and closes its connection.
  EXPECT_TRUE(bad.connection_closed(5000ms));
  auto r = good.nop();
  EXPECT_EQ(wait_code(r), ErrorCode::kOk);
  EXPECT_NE(daemon.log().find("ring indices corrupt"), std::string::npos);
}

TEST_F(Faults, KilledClientFailsPeersAndIsCleanedUp) {
  auto client = Client::connect(options_for(daemon, "survivor"));
  auto comm = Communicator::init(client, "kill", 2, 0);
  constexpr uint64_t kBytes = 8 << 20;
  auto send = client.allocate(kBytes), recv = client.allocate(2 * kBytes);
  // The victim submits 2 collectives and stops; we submit 4: two match, two wait on the victim.
  const pid_t victim = spawn({rank_program_path(), "--socket", daemon.socket(), "--mode", "hang",
                              "--key", "kill", "--nranks", "2", "--rank", "1", "--inflight", "2",
                              "--max-bytes", std::to_string(kBytes)});
  std::vector<Request> requests;
  for (int i = 0; i < 4; ++i) requests.push_back(comm.all_gather(send.data(), recv.data(), kBytes));
  EXPECT_EQ(wait_code(requests[0]), ErrorCode::kOk);
  EXPECT_EQ(wait_code(requests[1]), ErrorCode::kOk);
  const auto mapped_before = daemon.shared_memory();
  ::kill(victim, SIGKILL);
  EXPECT_EQ(wait_for(victim), 128 + SIGKILL);
  // The pending collectives fail within a second rather than hang.
  EXPECT_EQ(wait_code(requests[2], 1s), ErrorCode::kPeerLost);
  EXPECT_EQ(wait_code(requests[3], 1s), ErrorCode::kPeerLost);
  // And so does anything later on the communicator.
  auto later = comm.all_gather(send.data(), recv.data(), 64);
  EXPECT_EQ(wait_code(later), ErrorCode::kPeerLost);
  // The victim's segment and buffers are unmapped; ours stay.
  EXPECT_EQ(mapped_before.size(), 6u) << "2 sessions x (segment + 2 buffers)";
  // irisd fails the peers' collectives first, then unmaps the dead session: the failure can
  // reach us a moment before the unmapping is done.
  EXPECT_TRUE(eventually([&] { return daemon.shared_memory().size() == 3u; }))
      << daemon.shared_memory().size() << " mappings left";
  // The key is free for a new communicator with fresh ranks.
  auto other = Client::connect(options_for(daemon, "newcomer"));
  EXPECT_EQ(code_of([&] { Communicator::init(other, "kill", 2, 1); }), ErrorCode::kOk);
}

TEST_F(Faults, DaemonStoppedWhileWaitingReturnsDaemonGone) {
  auto client = Client::connect(options_for(daemon));
  auto comm = Communicator::init(client, "stop", 2, 0);
  auto send = client.allocate(64), recv = client.allocate(128);
  auto pending = comm.all_gather(send.data(), recv.data(), 64);  // rank 1 never comes
  std::thread stopper([&] {
    std::this_thread::sleep_for(100ms);
    daemon.stop();
  });
  EXPECT_EQ(wait_code(pending, 10s), ErrorCode::kDaemonGone);
  stopper.join();
  EXPECT_EQ(code_of([&] { comm.all_gather(send.data(), recv.data(), 64); }),
            ErrorCode::kDaemonGone);
}

TEST_F(Faults, DaemonKilledWhileWaitingReturnsDaemonGoneAndRestartCleansUp) {
  auto client = Client::connect(options_for(daemon));
  auto comm = Communicator::init(client, "crash", 2, 0);
  auto send = client.allocate(64), recv = client.allocate(128);
  auto pending = comm.all_gather(send.data(), recv.data(), 64);
  daemon.kill();  // SIGKILL: sockets and lock file stay behind (shared memory has no name)
  EXPECT_EQ(wait_code(pending, 10s), ErrorCode::kDaemonGone);
  daemon.start();  // same socket path
  auto again = Client::connect(options_for(daemon));
  auto r = again.nop();
  EXPECT_EQ(wait_code(r), ErrorCode::kOk);
}

TEST_F(Faults, SecondDaemonOnTheSameSocketRefusesToStart) {
  const auto result = run_program({irisd_path(), "--socket", daemon.socket()});
  EXPECT_EQ(result.exit_code, 1);
  auto client = Client::connect(options_for(daemon));  // the first one is untouched
  auto r = client.nop();
  EXPECT_EQ(wait_code(r), ErrorCode::kOk);
}

TEST(Engines, HsaWithoutKfdFailsClearlyAndAutoSaysWhyItPassedOver) {
  if (run_program({"/bin/sh", "-c", "test -e /dev/kfd"}).exit_code == 0)
    GTEST_SKIP() << "/dev/kfd is present (an AMD GPU node): this checks start-up without one";
  char dir[] = "/tmp/irisd-engine-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const auto hsa =
      run_program({"/bin/sh", "-c", irisd_path() + " --socket " + dir + "/s --engine hsa 2>&1"});
  std::system((std::string("rm -rf ") + dir).c_str());
  EXPECT_EQ(hsa.exit_code, 1);
  EXPECT_NE(hsa.output.find("--engine hsa"), std::string::npos) << hsa.output;
  EXPECT_NE(hsa.output.find("/dev/kfd"), std::string::npos) << hsa.output;
  DaemonProcess daemon({"--engine", "auto"});
  const auto status =
      run_program({iris_ctl_path(), "--socket", daemon.socket(), "status", "--json"});
  EXPECT_NE(status.output.find("hsa unavailable (no /dev/kfd"), std::string::npos) << status.output;
  // libiris's HIP side says what is missing instead of crashing without an AMD GPU.
  auto client = Client::connect(options_for(daemon));
  auto comm = Communicator::init(client, "hip", 1, 0);
  auto buf = client.allocate(64);
  int not_gpu_memory = 0;
  EXPECT_EQ(code_of([&] { client.register_hip_buffer(&not_gpu_memory, sizeof(int)); }),
            ErrorCode::kUnavailable);
  auto fake_stream = reinterpret_cast<ihipStream_t*>(0x1);
  EXPECT_EQ(code_of([&] { comm.all_gather(buf.data(), buf.data(), 64, fake_stream); }),
            ErrorCode::kUnavailable);
  EXPECT_EQ(code_of([&] {
              comm.all_gather(buf.data(), buf.data(), 64, static_cast<ihipStream_t*>(nullptr));
            }),
            ErrorCode::kInvalidArgument);
  // The host-blocking path is untouched by the failed stream-ordered attempts.
  auto r = comm.all_gather(buf.data(), buf.data(), 64);
  EXPECT_EQ(wait_code(r), ErrorCode::kOk);
}

TEST(Engines, CudaWithoutAGpuFailsClearlyAndAutoFallsBackToHost) {
  if (run_program({"/bin/sh", "-c", "test -e /dev/nvidiactl"}).exit_code == 0)
    GTEST_SKIP() << "an NVIDIA device is present; the GPU tests cover the cuda engine";
  char dir[] = "/tmp/irisd-engine-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  EXPECT_EQ(run_program({irisd_path(), "--socket", std::string(dir) + "/s", "--engine", "cuda"})
                .exit_code,
            1);
  std::system((std::string("rm -rf ") + dir).c_str());
  DaemonProcess daemon({"--engine", "auto"});
  const auto status =
      run_program({iris_ctl_path(), "--socket", daemon.socket(), "status", "--json"});
  EXPECT_NE(status.output.find("\"engine\": \"host\""), std::string::npos) << status.output;
  EXPECT_NE(status.output.find("auto: "), std::string::npos) << status.output;
  // Stream-ordered calls need a CUDA driver in the client too, and say so.
  auto client = Client::connect(options_for(daemon));
  auto comm = Communicator::init(client, "s", 1, 0);
  auto buf = client.allocate(64);
  auto fake_stream = reinterpret_cast<CUstream_st*>(0x1);
  EXPECT_EQ(code_of([&] { comm.all_gather(buf.data(), buf.data(), 64, fake_stream); }),
            ErrorCode::kUnavailable);
}

// A client of the previous protocol attaches (an upgrade leaves such jobs' new processes
// working); one newer, or older than that, is refused with both versions named.
TEST_F(Faults, ProtocolMismatchIsRefusedClearly) {
  auto attach_as = [&](uint32_t version) {
    net::Fd fd = net::connect_unix(daemon.socket() + ".attach");
    v1::AttachRequest request;
    request.set_protocol_version(version);
    EXPECT_TRUE(net::send_frame(fd.get(), request.SerializeAsString()));
    auto frame = net::recv_frame(fd.get(), 5s, 4);
    v1::AttachResponse response;
    EXPECT_TRUE(frame && response.ParseFromString(frame->payload));
    return response;
  };
  for (uint32_t refused : {kProtocolVersion + 1, kOldestClientProtocol - 1}) {
    const auto response = attach_as(refused);
    EXPECT_EQ(response.error_code(), static_cast<uint32_t>(ErrorCode::kProtocolMismatch));
    const std::string& why = response.error_message();
    EXPECT_NE(why.find("client speaks protocol '" + std::to_string(refused) + "'"),
              std::string::npos)
        << why;
    EXPECT_NE(why.find("speaks " + std::to_string(kProtocolVersion)), std::string::npos) << why;
    EXPECT_NE(why.find("or the one before"), std::string::npos) << why;
  }
  EXPECT_EQ(attach_as(kOldestClientProtocol).error_code(), 0u);
}

TEST_F(Faults, GarbageOnTheAttachSocketIsDropped) {
  {
    net::Fd fd = net::connect_unix(daemon.socket() + ".attach");
    ASSERT_TRUE(net::send_frame(fd.get(), "\xff\xff\xff not a protobuf"));
    auto frame = net::recv_frame(fd.get(), 5s);
    ASSERT_TRUE(frame);
    v1::AttachResponse response;
    ASSERT_TRUE(response.ParseFromString(frame->payload));
    EXPECT_EQ(response.error_code(), static_cast<uint32_t>(ErrorCode::kInvalidArgument));
  }
  {
    net::Fd fd = net::connect_unix(daemon.socket() + ".attach");
    const char huge_length[4] = {'\xff', '\xff', '\xff', '\x7f'};
    ASSERT_EQ(::write(fd.get(), huge_length, 4), 4);
  }
  auto client = Client::connect(options_for(daemon));
  auto r = client.nop();
  EXPECT_EQ(wait_code(r), ErrorCode::kOk);
}

TEST_F(Faults, BadSessionRequestsOnTheAttachSocketGetErrorsNotADeadSession) {
  net::Fd fd = net::connect_unix(daemon.socket() + ".attach");
  v1::AttachRequest hello;
  hello.set_protocol_version(kProtocolVersion);
  ASSERT_TRUE(net::send_frame(fd.get(), hello.SerializeAsString()));
  auto attached = net::recv_frame(fd.get(), 5s);
  ASSERT_TRUE(attached);
  v1::AttachResponse welcome;
  ASSERT_TRUE(welcome.ParseFromString(attached->payload));
  ASSERT_EQ(welcome.error_code(), 0u) << welcome.error_message();

  auto ask = [&](const std::string& payload, const std::vector<int>& fds) {
    EXPECT_TRUE(net::send_frame(fd.get(), payload, fds));
    auto frame = net::recv_frame(fd.get(), 5s);
    v1::SessionResponse response;
    EXPECT_TRUE(frame && response.ParseFromString(frame->payload));
    return response;
  };
  auto r = ask("\x0a\xff not a request", {});
  EXPECT_EQ(r.error_code(), static_cast<uint32_t>(ErrorCode::kInvalidArgument));
  EXPECT_NE(r.error_message().find("malformed"), std::string::npos) << r.error_message();

  v1::SessionRequest request;
  request.mutable_register_vmm()->set_bus_id("0000:00:00.0");
  request.mutable_register_vmm()->add_chunk_bytes(4096);
  request.mutable_register_vmm()->set_bytes(4096);
  r = ask(request.SerializeAsString(), {});
  EXPECT_EQ(r.error_code(), static_cast<uint32_t>(ErrorCode::kInvalidArgument));
  EXPECT_NE(r.error_message().find("without file descriptors"), std::string::npos)
      << r.error_message();

  // A descriptor that is no GPU memory, to a daemon on the host engine: refused with the reason.
  net::Fd not_gpu_memory(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  r = ask(request.SerializeAsString(), {not_gpu_memory.get()});
  EXPECT_EQ(r.error_code(), static_cast<uint32_t>(ErrorCode::kInvalidArgument));
  EXPECT_NE(r.error_message().find("--engine cuda"), std::string::npos) << r.error_message();

  // The session lived through all of it.
  const auto sessions =
      run_program({iris_ctl_path(), "--socket", daemon.socket(), "sessions", "--json"});
  EXPECT_NE(sessions.output.find("\"session\": " + std::to_string(welcome.session_id())),
            std::string::npos)
      << sessions.output;
}

}  // namespace
}  // namespace iris::testing
