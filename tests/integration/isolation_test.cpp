// Identity from the kernel, and users kept apart. Tests that switch uid need root (CI runs as
// root); elsewhere they skip and say why.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <thread>

#include "iris/iris.hpp"
#include "tests/support/client_helpers.hpp"
#include "tests/support/ctl_json.hpp"
#include "tests/support/daemon_process.hpp"
#include "tests/support/raw_session.hpp"

namespace iris::testing {
namespace {

using namespace std::chrono_literals;
constexpr uid_t kOtherUid = 65534;  // nobody

// A rank process, run as another uid, that joins a communicator and stays until its stdin closes.
struct OtherUserRank {
  OtherUserRank(const DaemonProcess& d, const std::string& key, uint32_t nranks, uint32_t rank) {
    const std::string command = rank_program_path() + " --socket " + d.socket() +
                                " --mode comm-init --key " + key + " --nranks " +
                                std::to_string(nranks) + " --rank " + std::to_string(rank) +
                                " --as-uid " + std::to_string(kOtherUid);
    pipe = ::popen(command.c_str(), "w");
  }
  ~OtherUserRank() {
    if (pipe != nullptr) ::pclose(pipe);
  }
  int finish() {
    const int status = ::pclose(pipe);
    pipe = nullptr;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  std::FILE* pipe;
};

// Names in /dev/shm that mention irisd.
std::vector<std::string> irisd_names_in_dev_shm() {
  std::vector<std::string> names;
  if (DIR* d = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(d))
      if (std::string(e->d_name).find("irisd") != std::string::npos) names.push_back(e->d_name);
    ::closedir(d);
  }
  return names;
}

TEST(Isolation, SharedMemoryHasNoNameAnyoneCouldOpenOrSquat) {
  DaemonProcess daemon;
  const auto before = irisd_names_in_dev_shm();
  auto client = Client::connect(options_for(daemon));
  auto buffer = client.allocate(4096);
  EXPECT_EQ(irisd_names_in_dev_shm(), before) << "irisd created a named segment";
  // The daemon maps the session's segment and the buffer as memfds, handed over as descriptors.
  EXPECT_EQ(daemon.shared_memory(),
            (std::set<std::string>{"irisd-session-1", "irisd-session-1-buffer-1"}));
}

TEST(Isolation, SocketModeAndGroupAreConfigurable) {
  DaemonProcess daemon({"--socket-mode", "0640", "--socket-group", "nogroup"});
  for (const std::string& path : {daemon.socket(), daemon.socket() + ".attach"}) {
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0640u) << path;
    if (::getuid() == 0) {
      EXPECT_EQ(st.st_gid, 65534u) << path;
    }
  }
}

TEST(Isolation, ConfigFileSetsWhatFlagsSetAndFlagsWin) {
  char path[] = "/tmp/irisd-config-XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  const std::string toml = "ring-depth = 8\nsocket-mode = \"0600\"\nengine-workers = 3\n";
  ASSERT_EQ(::write(fd, toml.data(), toml.size()), static_cast<ssize_t>(toml.size()));
  ::close(fd);
  DaemonProcess daemon({"--config", path, "--engine-workers", "5"});
  auto client = Client::connect(options_for(daemon));
  EXPECT_EQ(client.ring_depth(), 8u);
  struct stat st {};
  ASSERT_EQ(::stat(daemon.socket().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const auto status =
      run_program({iris_ctl_path(), "--socket", daemon.socket(), "status", "--json"});
  EXPECT_NE(status.output.find("host-worker-4"), std::string::npos) << status.output;
  EXPECT_EQ(status.output.find("host-worker-5"), std::string::npos);
  ::unlink(path);
}

// deploy/irisd.toml as the package installs it starts irisd (its socket, group and metrics port
// replaced by flags, which win, so that the test needs neither root's paths nor a free 9478).
TEST(Isolation, TheShippedConfigFileStartsIrisd) {
  DaemonProcess daemon({"--config", std::string(IRIS_TEST_SOURCE_DIR) + "/deploy/irisd.toml",
                        "--socket-group", "", "--metrics-address", "127.0.0.1:0", "--engine",
                        "host"});
  auto client = Client::connect(options_for(daemon));
  EXPECT_EQ(client.ring_depth(), 256u);
}

TEST(Isolation, BadSocketSettingsStopTheDaemonWithAReason) {
  char dir[] = "/tmp/irisd-bad-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string socket = std::string(dir) + "/irisd.sock";
  EXPECT_NE(run_program({irisd_path(), "--socket", socket, "--socket-mode", "rw"}).exit_code, 0);
  EXPECT_EQ(run_program({irisd_path(), "--socket", socket, "--socket-group", "no-such-group-x"})
                .exit_code,
            1);
  EXPECT_NE(run_program({irisd_path(), "--socket", socket, "--ring-depth", "3"}).exit_code, 0);
  std::system((std::string("rm -rf ") + dir).c_str());
}

TEST(Isolation, OneSessionCannotReachAnothersBuffers) {
  DaemonProcess daemon;
  auto a = RawClient::attach(daemon.socket());
  auto b = Client::connect(options_for(daemon));
  // Buffer ids name buffers within a session: b's second buffer has an id a has not (a holds one).
  auto b_first = b.allocate(4096);
  auto theirs = b.allocate(4096);
  const uint64_t comm = a.comm_init("mine", 1, 0);
  const auto mine = a.allocate(4096);
  ASSERT_NE(theirs.id(), mine.id);
  shm::SubmitEntry e{};
  e.opcode = static_cast<uint32_t>(shm::Opcode::kAllGather);
  e.comm_id = comm;
  e.seq = 1;
  e.send_buffer = theirs.id();  // a real buffer id, but b's
  e.recv_buffer = mine.id;
  e.bytes = 16;
  EXPECT_EQ(a.wait(0, a.submit(e)), ErrorCode::kNotFound)
      << "reading another session's buffer must fail as an unknown buffer";
}

TEST(Isolation, PeerIdentityComesFromTheKernel) {
  DaemonProcess daemon;
  auto client = Client::connect(options_for(daemon));
  const auto result =
      run_program({iris_ctl_path(), "--socket", daemon.socket(), "sessions", "--json"});
  ASSERT_EQ(result.exit_code, 0);
  EXPECT_NE(result.output.find("\"pid\": " + std::to_string(::getpid())), std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("\"uid\": " + std::to_string(::getuid())), std::string::npos);
}

TEST(Isolation, CommunicatorsDoNotSpanUsers) {
  if (::getuid() != 0) GTEST_SKIP() << "needs root to run a client as uid " << kOtherUid;
  DaemonProcess daemon({"--socket-mode", "0666"});
  auto client = Client::connect(options_for(daemon));
  auto comm = Communicator::init(client, "root-only", 2, 0);
  // The other user's rank of the same key joins a communicator of its own: keys are each user's
  // own, so it can neither enter root's communicator nor keep root's ranks out of it.
  OtherUserRank other(daemon, "root-only", 2, 1);
  const auto listed = [&] { return ctl_json(daemon, {"comms"})["communicators"]; };
  ASSERT_TRUE(eventually([&] { return listed().size() == 2; })) << listed().dump();
  for (const auto& c : listed()) {  // each holds its own user's rank only
    EXPECT_EQ(c["key"], "root-only");
    const uint32_t uid = c["uid"];
    EXPECT_EQ(c["joined"], nlohmann::json::array({uid == 0 ? 0 : 1})) << c.dump();
  }
  EXPECT_EQ(other.finish(), 0);
  // The other user's shared memory has no name a third party could open: irisd maps it as
  // memfds, and only the owner's process received the descriptors.
  OtherUserRank owner(daemon, "own-comm", 1, 0);  // stays attached until its stdin closes
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (daemon.shared_memory().empty() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
  EXPECT_FALSE(daemon.shared_memory().empty()) << "the other user's session never appeared";
  EXPECT_TRUE(irisd_names_in_dev_shm().empty());
  EXPECT_EQ(owner.finish(), 0);
}

TEST(Isolation, CrossUserCommunicatorsWhenConfigured) {
  if (::getuid() != 0) GTEST_SKIP() << "needs root to run a client as uid " << kOtherUid;
  DaemonProcess daemon({"--socket-mode", "0666", "--allow-cross-uid-comms"});
  auto client = Client::connect(options_for(daemon));
  auto comm = Communicator::init(client, "shared", 2, 0);
  OtherUserRank other(daemon, "shared", 2, 1);
  EXPECT_EQ(other.finish(), 0);
}

TEST(Isolation, SocketModeKeepsOtherUsersOut) {
  if (::getuid() != 0) GTEST_SKIP() << "needs root to run a client as uid " << kOtherUid;
  DaemonProcess daemon;  // default 0660, root's group: nobody may not connect
  OtherUserRank other(daemon, "x", 1, 0);
  EXPECT_EQ(other.finish(), 10 + static_cast<int>(ErrorCode::kUnavailable));
}

TEST(Isolation, QuotasPerUserNameTheLimit) {
  if (::getuid() != 0) GTEST_SKIP() << "needs root to run a client as uid " << kOtherUid;
  DaemonProcess daemon({"--socket-mode", "0666", "--max-sessions-per-uid", "2",
                        "--max-buffer-bytes-per-uid", "1048576"});
  auto a = Client::connect(options_for(daemon));
  auto b = Client::connect(options_for(daemon));
  try {
    Client::connect(options_for(daemon));
    ADD_FAILURE() << "a third session of one uid was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kLimitExceeded);
    EXPECT_NE(std::string(e.what()).find("max_sessions_per_uid"), std::string::npos) << e.what();
  }
  OtherUserRank other(daemon, "other-user", 1, 0);  // another uid still attaches
  auto kept = a.allocate(600'000);
  try {
    b.allocate(600'000);
    ADD_FAILURE() << "host buffers past the uid's byte quota were allocated";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kLimitExceeded);
    EXPECT_NE(std::string(e.what()).find("max_buffer_bytes_per_uid"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(other.finish(), 0);
}

// iris-ctl's list as uid kOtherUid.
std::string list_as_other_user(const DaemonProcess& daemon, const char* what) {
  return run_program({"/usr/bin/setpriv", "--reuid", std::to_string(kOtherUid), "--regid",
                      std::to_string(kOtherUid), "--clear-groups", iris_ctl_path(), "--socket",
                      daemon.socket(), what, "--json"})
      .output;
}

TEST(Isolation, ListsShowAUserItsOwnSessionsAndCommunicators) {
  if (::getuid() != 0) GTEST_SKIP() << "needs root to run iris-ctl as uid " << kOtherUid;
  for (const bool operator_group : {false, true}) {
    std::vector<std::string> args = {"--socket-mode", "0666"};
    if (operator_group) args.insert(args.end(), {"--operator-group", "nogroup"});
    DaemonProcess daemon(args);
    auto root = Client::connect(options_for(daemon, "root-client"));
    auto comm = Communicator::init(root, "root-comm", 2, 0);
    OtherUserRank other(daemon, "nobody-comm", 2, 0);  // stays until finish()
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (run_program({iris_ctl_path(), "--socket", daemon.socket(), "sessions", "--json"})
                   .output.find("\"uid\": 65534") == std::string::npos &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(20ms);
    const std::string sessions = list_as_other_user(daemon, "sessions");
    const std::string comms = list_as_other_user(daemon, "comms");
    EXPECT_NE(sessions.find("\"uid\": 65534"), std::string::npos) << sessions;
    EXPECT_NE(comms.find("nobody-comm"), std::string::npos) << comms;
    if (operator_group) {  // nobody's group is the operator group: it sees everything
      EXPECT_NE(sessions.find("root-client"), std::string::npos) << sessions;
      EXPECT_NE(comms.find("root-comm"), std::string::npos) << comms;
    } else {
      EXPECT_EQ(sessions.find("root-client"), std::string::npos) << sessions;
      EXPECT_EQ(comms.find("root-comm"), std::string::npos) << comms;
    }
    const std::string as_root =
        run_program({iris_ctl_path(), "--socket", daemon.socket(), "comms", "--json"}).output;
    EXPECT_NE(as_root.find("nobody-comm"), std::string::npos) << "root sees every communicator";
    EXPECT_NE(as_root.find("root-comm"), std::string::npos);
    other.finish();
  }
}

}  // namespace
}  // namespace iris::testing
