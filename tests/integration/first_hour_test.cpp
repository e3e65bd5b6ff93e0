// What a new user meets in the first hour: errors that say what irisd knows, handles that fail
// clearly when empty or used after fork(), flags and config keys named when wrong, the default
// socket from $IRIS_SOCKET, barrier and wait_all, and iris-ctl explaining a stuck collective.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "iris/iris.hpp"
#include "tests/support/client_helpers.hpp"
#include "tests/support/daemon_process.hpp"

namespace iris::testing {
namespace {

using namespace std::chrono_literals;

std::string what_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(FirstHour, ErrorsSayWhichFieldAndWhichSizes) {
  DaemonProcess daemon;
  TwoRanks pair(daemon, "sizes", 1024);
  auto& [a, b, ca, cb, sa, ra, sb, rb] = pair;
  auto x = ca.all_gather(sa.data(), ra.data(), 100);
  auto y = cb.all_gather(sb.data(), rb.data(), 200);
  const std::string wx = what_of([&] { x.wait(); });
  const std::string wy = what_of([&] { y.wait(); });
  EXPECT_NE(wx.find("size_mismatch: rank 1 passed 200 bytes, rank 0 100"), std::string::npos) << wx;
  EXPECT_EQ(wx, wy) << "every rank is told the same reason";
  // The daemon's check of one rank's own request: overlapping send and receive.
  auto solo = Client::connect(options_for(daemon));
  auto one = Communicator::init(solo, "overlap", 1, 0);
  auto buf = solo.allocate(4096);
  auto z = one.all_gather(buf.as<char>() + 10, buf.data(), 100);
  const std::string wz = what_of([&] { z.wait(); });
  EXPECT_NE(wz.find("send range overlaps the receive range"), std::string::npos) << wz;
  // A rank that leaves is named, with its pid.
  auto w = ca.all_gather(sa.data(), ra.data(), 8);
  cb.destroy();
  const std::string ww = what_of([&] { w.wait(); });
  EXPECT_NE(ww.find("rank 1 of communicator 'sizes'"), std::string::npos) << ww;
  EXPECT_NE(ww.find("pid " + std::to_string(::getpid())), std::string::npos) << ww;
}

TEST(FirstHour, ClientSideRefusalsAreCountedForTheOperator) {
  DaemonProcess daemon;
  auto client = Client::connect(options_for(daemon));
  auto comm = Communicator::init(client, "refusals", 1, 0);
  char stack[64];
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(code_of([&] { comm.all_gather(stack, stack, 8); }), ErrorCode::kNotFound);
  const auto sessions =
      run_program({iris_ctl_path(), "--socket", daemon.socket(), "sessions", "--json"});
  EXPECT_NE(sessions.output.find("\"rejected\": 3"), std::string::npos) << sessions.output;
  EXPECT_NE(sessions.output.find("refusals:0/1"), std::string::npos) << sessions.output;
}

TEST(FirstHour, EmptyHandlesThrowInsteadOfCrashing) {
  Client client;
  EXPECT_EQ(code_of([&] { client.allocate(64); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { client.nop(); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { client.session_id(); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { Communicator::init(client, "k", 1, 0); }), ErrorCode::kInvalidArgument);
  Communicator comm;
  EXPECT_EQ(code_of([&] { comm.rank(); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { comm.barrier(); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { comm.all_gather(nullptr, nullptr, 0); }), ErrorCode::kInvalidArgument);
  Request request;
  EXPECT_EQ(code_of([&] { request.wait(); }), ErrorCode::kInvalidArgument);
  DaemonProcess daemon;
  auto moved_from = Client::connect(options_for(daemon));
  auto owner = std::move(moved_from);
  EXPECT_EQ(code_of([&] { moved_from.allocate(64); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { owner.nop().wait(); }), ErrorCode::kOk);
}

TEST(FirstHour, AForkedChildGetsAClearErrorAndTheParentGoesOn) {
  DaemonProcess daemon;
  auto client = Client::connect(options_for(daemon));
  auto comm = Communicator::init(client, "fork", 1, 0);
  auto send = client.allocate(64), recv = client.allocate(64);
  const pid_t child = ::fork();
  if (child == 0) {
    // Like a DataLoader worker touching the parent's client.
    const ErrorCode a = code_of([&] { comm.all_gather(send.data(), recv.data(), 64); });
    const ErrorCode b = code_of([&] { client.allocate(64); });
    const std::string why = what_of([&] { client.nop(); });
    const bool ok = a == ErrorCode::kInvalidArgument && b == ErrorCode::kInvalidArgument &&
                    why.find("must attach its own") != std::string::npos;
    _exit(ok ? 0 : 1);  // no destructors: the parent's session is not the child's to end
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child saw no clear error";
  std::memset(send.data(), 9, 64);
  EXPECT_EQ(code_of([&] { comm.all_gather(send.data(), recv.data(), 64).wait(); }), ErrorCode::kOk);
  EXPECT_EQ(recv.as<unsigned char>()[63], 9);
}

TEST(FirstHour, ADaemonThatStoppedIsDaemonGoneNotABug) {
  DaemonProcess daemon({"--resume-window-ms", "0"});  // clients do not wait for it to come back
  auto client = Client::connect(options_for(daemon));
  daemon.stop();
  EXPECT_EQ(code_of([&] { client.allocate(64); }), ErrorCode::kDaemonGone);
  EXPECT_FALSE(std::ifstream(daemon.socket() + ".lock").good())
      << "a clean stop leaves no lock file behind";
}

TEST(FirstHour, IrisSocketIsTheDefaultForClientsAndIrisCtl) {
  DaemonProcess daemon;
  ::setenv("IRIS_SOCKET", daemon.socket().c_str(), 1);
  EXPECT_EQ(ClientOptions{}.socket_path, daemon.socket());
  EXPECT_EQ(code_of([&] { Client::connect().nop().wait(); }), ErrorCode::kOk);
  const auto status = run_program(
      {"/usr/bin/env", "IRIS_SOCKET=" + daemon.socket(), iris_ctl_path(), "status", "--json"});
  ::unsetenv("IRIS_SOCKET");
  EXPECT_EQ(status.exit_code, 0) << status.output;
  EXPECT_NE(status.output.find(daemon.socket()), std::string::npos) << status.output;
}

// The client's numbers from the environment ($IRIS_WAIT_SPIN_US, $IRIS_RESUME_WINDOW_MS) are
// checked at attach and named when wrong; a waiter that never spins (0) still gets its result.
TEST(FirstHour, ClientSettingsFromTheEnvironmentAreCheckedAndNamed) {
  DaemonProcess daemon;
  for (const auto& [name, value] : std::vector<std::pair<std::string, std::string>>{
           {"IRIS_WAIT_SPIN_US", "fast"},
           {"IRIS_WAIT_SPIN_US", "-5"},
           {"IRIS_RESUME_WINDOW_MS", "10s"},
           {"IRIS_RESUME_WINDOW_MS", "99999999999999999999999"}}) {
    ::setenv(name.c_str(), value.c_str(), 1);
    const std::string what = what_of([&] { Client::connect(options_for(daemon)); });
    ::unsetenv(name.c_str());
    EXPECT_NE(what.find(name), std::string::npos) << name << "=" << value << ": " << what;
    EXPECT_NE(what.find(value), std::string::npos) << what;
  }
  ::setenv("IRIS_WAIT_SPIN_US", "0", 1);
  TwoRanks pair(daemon, "no-spin", 64);
  ::unsetenv("IRIS_WAIT_SPIN_US");
  auto& [a, b, ca, cb, sa, ra, sb, rb] = pair;
  for (int i = 0; i < 50; ++i) {
    auto x = ca.all_gather(sa.data(), ra.data(), 32);
    auto y = cb.all_gather(sb.data(), rb.data(), 32);
    EXPECT_EQ(code_of([&] { x.wait(); }), ErrorCode::kOk);
    EXPECT_EQ(code_of([&] { y.wait(); }), ErrorCode::kOk);
  }
  ClientOptions options = options_for(daemon);
  options.wait_spin = std::chrono::microseconds(0);
  EXPECT_EQ(code_of([&] { Client::connect(options).nop().wait(); }), ErrorCode::kOk);
}

TEST(FirstHour, BadFlagsAndConfigKeysAreNamed) {
  auto stderr_of = [](std::vector<std::string> args) {
    args.insert(args.begin(), {"/bin/sh", "-c", "\"$0\" \"$@\" 2>&1"});
    return run_program(args);
  };
  auto depth = stderr_of({irisd_path(), "--ring-depth", "lots"});
  EXPECT_NE(depth.exit_code, 0);
  EXPECT_NE(depth.output.find("--ring-depth: 'lots' is not a power of two"), std::string::npos)
      << depth.output;
  auto mode = stderr_of({irisd_path(), "--socket-mode", "9z"});
  EXPECT_NE(mode.output.find("--socket-mode: '9z' is not an octal mode"), std::string::npos)
      << mode.output;
  const std::string config = "/tmp/iris-first-hour-" + std::to_string(::getpid()) + ".toml";
  std::ofstream(config) << "ring-depth = 64\nmax-sesions = 3\n";
  auto typo = stderr_of({irisd_path(), "--config", config, "--socket", config + ".sock"});
  std::remove(config.c_str());
  EXPECT_NE(typo.exit_code, 0);
  EXPECT_NE(typo.output.find("max-sesions"), std::string::npos) << typo.output;
  auto version = run_program({irisd_path(), "--version"});
  EXPECT_NE(version.output.find("irisd 0."), std::string::npos) << version.output;
  auto ctl = stderr_of({iris_ctl_path(), "statsx"});
  EXPECT_EQ(ctl.exit_code, 64);
  EXPECT_NE(ctl.output.find("unknown command or argument 'statsx'"), std::string::npos)
      << ctl.output;
}

// irisd --version (and iris-ctl status, the build metric) names the commit the binary was built
// from, read at build time: read at configure time, it named a commit days old after incremental
// builds.
TEST(FirstHour, VersionNamesTheCommitItWasBuiltFrom) {
  const auto head =
      run_program({"/usr/bin/git", "-C", IRIS_TEST_SOURCE_DIR, "rev-parse", "--short", "HEAD"});
  if (head.exit_code != 0 || head.output.empty())
    GTEST_SKIP() << "not a git checkout (or no git): the build names its commit 'unknown'";
  const std::string commit = head.output.substr(0, head.output.find_first_of("\r\n"));
  auto version = run_program({irisd_path(), "--version"});
  EXPECT_NE(version.output.find("(" + commit + " "), std::string::npos)
      << version.output << " does not name HEAD " << commit << ": rebuild before testing";
}

TEST(FirstHour, BarrierAndWaitAll) {
  DaemonProcess daemon;
  auto a = Client::connect(options_for(daemon));
  auto b = Client::connect(options_for(daemon));
  auto ca = Communicator::init(a, "barrier", 2, 0);
  auto cb = Communicator::init(b, "barrier", 2, 1);
  std::atomic<bool> passed{false};
  std::thread late([&] {
    std::this_thread::sleep_for(100ms);
    EXPECT_FALSE(passed) << "rank 0 left the barrier before rank 1 entered it";
    cb.barrier();
  });
  ca.barrier();
  passed = true;
  late.join();
  // wait_all: every request completes, then the first failure is thrown.
  auto s = a.allocate(64), r = a.allocate(128);
  std::vector<Request> requests;
  requests.push_back(ca.all_gather(s.data(), r.data(), 64));  // rank 1 never comes
  requests.push_back(a.nop());
  cb.destroy();
  EXPECT_EQ(code_of([&] { wait_all(requests); }), ErrorCode::kPeerLost);
  EXPECT_TRUE(requests[1].test());
}

TEST(FirstHour, ExistingHostMemoryIsSharedInPlace) {
  DaemonProcess daemon;
  auto client = Client::connect(options_for(daemon));
  auto comm = Communicator::init(client, "host-memory", 1, 0);
  const std::size_t bytes = 3 * 4096;
  auto* mine = static_cast<unsigned char*>(
      ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(mine, MAP_FAILED);
  for (std::size_t i = 0; i < bytes; ++i) mine[i] = static_cast<unsigned char>(i * 13);
  auto registered = client.register_host(mine, bytes);
  for (std::size_t i = 0; i < bytes; ++i)
    ASSERT_EQ(mine[i], static_cast<unsigned char>(i * 13)) << "contents moved intact, byte " << i;
  auto recv = client.allocate(bytes);
  comm.all_gather(mine, recv.data(), bytes).wait();  // irisd reads the user's own pointer
  EXPECT_EQ(std::memcmp(recv.data(), mine, bytes), 0);
  mine[5] = 0xAB;  // still the user's memory, at the same address
  comm.all_gather(mine, recv.data(), 8).wait();
  EXPECT_EQ(recv.as<unsigned char>()[5], 0xAB);
  // What cannot be moved is refused with the reason.
  EXPECT_NE(what_of([&] { client.register_host(mine + 1, 64); }).find("page-aligned"),
            std::string::npos);
  const std::string path = "/tmp/iris-host-" + std::to_string(::getpid());
  const int fd = ::open(path.c_str(), O_CREAT | O_RDWR, 0600);
  ASSERT_EQ(::ftruncate(fd, 4096), 0);
  void* file = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  EXPECT_NE(what_of([&] { client.register_host(file, 4096); }).find("anonymous"),
            std::string::npos);
  ::munmap(file, 4096);
  ::close(fd);
  ::unlink(path.c_str());
  registered = Buffer();
  ::munmap(mine, bytes);
}

TEST(FirstHour, IrisCtlExplainsAStuckCollective) {
  DaemonProcess daemon;
  auto a = Client::connect(options_for(daemon, "rank-zero"));
  auto b = Client::connect(options_for(daemon, "rank-one"));
  auto ca = Communicator::init(a, "stuck", 3, 0);
  auto cb = Communicator::init(b, "stuck", 3, 1);  // rank 2 never joins
  auto s = a.allocate(64), r = a.allocate(192);
  auto pending = ca.all_gather(s.data(), r.data(), 64);
  // Once irisd has taken the all-gather from the ring, iris-ctl shows it waiting.
  ProgramResult comms;
  EXPECT_TRUE(eventually([&] {
    comms = run_program({iris_ctl_path(), "--socket", daemon.socket(), "comms"});
    return comms.output.find("not joined") != std::string::npos;
  }));
  // Rank 1 holds session 2 in this process; rank 2 was never joined.
  EXPECT_NE(comms.output.find("1: 2/" + std::to_string(::getpid())), std::string::npos)
      << comms.output;
  EXPECT_NE(comms.output.find("2: not joined"), std::string::npos) << comms.output;
  EXPECT_NE(comms.output.find("waiting_s"), std::string::npos) << comms.output;
}

}  // namespace
}  // namespace iris::testing
