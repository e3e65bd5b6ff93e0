#include "tests/support/daemon_process.hpp"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "iris/shared/shm_segment.hpp"
#include "iris/shared/unix_socket.hpp"

namespace iris::testing {

namespace {
std::string binary(const char* built_at) {
  const char* dir = std::getenv("IRIS_BIN_DIR");
  if (dir == nullptr || dir[0] == '\0') return built_at;
  const std::string path = built_at;
  return std::string(dir) + "/" + path.substr(path.rfind('/') + 1);
}
}  // namespace

std::string irisd_path() { return binary(IRIS_TEST_IRISD); }
std::string irisd_next_path() { return binary(IRIS_TEST_IRISD_NEXT); }
std::string iris_ctl_path() { return binary(IRIS_TEST_IRIS_CTL); }
std::string rank_program_path() { return binary(IRIS_TEST_RANK_PROGRAM); }
std::string gpu_rank_program_path() { return binary(IRIS_TEST_GPU_RANK_PROGRAM); }

namespace {
std::vector<char*> to_argv(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  return argv;
}
}  // namespace

pid_t spawn(const std::vector<std::string>& args) {
  auto argv = to_argv(args);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

int wait_for(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

ProgramResult run_program(const std::vector<std::string>& args) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) throw std::runtime_error("pipe");
  auto argv = to_argv(args);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(pipe_fds[1], STDOUT_FILENO);
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    ::execv(argv[0], argv.data());
    _exit(127);
  }
  ::close(pipe_fds[1]);
  std::string output;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(pipe_fds[0], buf, sizeof(buf))) > 0) output.append(buf, n);
  ::close(pipe_fds[0]);
  return {wait_for(pid), output};
}

DaemonProcess::DaemonProcess(std::vector<std::string> extra_args) : args_(std::move(extra_args)) {
  char tmpl[] = "/tmp/irisd-test-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
  dir_ = tmpl;
  ::chmod(dir_.c_str(), 0755);  // tests that drop privileges must reach the sockets
  socket_ = dir_ + "/irisd.sock";
  start();
}

DaemonProcess::~DaemonProcess() {
  if (pid_ > 0) stop();
  std::system(("rm -rf " + dir_).c_str());
}

std::set<std::string> DaemonProcess::shared_memory() const {
  std::set<std::string> names;
  std::ifstream maps("/proc/" + std::to_string(pid_) + "/maps");
  for (std::string line; std::getline(maps, line);) {
    const auto at = line.find("/memfd:irisd-");
    if (at == std::string::npos) continue;
    auto name = line.substr(at + 7);
    name = name.substr(0, name.find(' '));
    names.insert(name);
  }
  return names;
}

void DaemonProcess::start() {
  std::vector<std::string> args = {binary_.empty() ? irisd_path() : binary_, "--socket", socket_};
  // Debug logs help a failing test, unless the test sets the level itself (a flag would win
  // over its --config file).
  if (std::find(args_.begin(), args_.end(), "--config") == args_.end() &&
      std::find(args_.begin(), args_.end(), "--log-level") == args_.end()) {
    args.push_back("--log-level");
    args.push_back("debug");
  }
  args.insert(args.end(), args_.begin(), args_.end());
  auto argv = to_argv(args);
  const std::string log_path = dir_ + "/irisd.log";
  pid_ = ::fork();
  if (pid_ == 0) {
    std::FILE* log = std::fopen(log_path.c_str(), "a");
    if (log != nullptr) {
      ::dup2(fileno(log), STDOUT_FILENO);
      ::dup2(fileno(log), STDERR_FILENO);
    }
    ::execv(argv[0], argv.data());
    _exit(127);
  }
  // Ready once the attach socket accepts (it is the last thing irisd opens).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      throw std::runtime_error("irisd exited at start:\n" + log());
    }
    try {
      net::connect_unix(socket_ + ".attach");
      return;
    } catch (const std::exception&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  throw std::runtime_error("irisd did not become ready:\n" + log());
}

int DaemonProcess::stop() {
  if (pid_ <= 0) return -1;
  ::kill(pid_, SIGTERM);
  const int status = wait_for(pid_);
  pid_ = -1;
  return status;
}

std::optional<int> DaemonProcess::ended() {
  if (pid_ <= 0) return std::nullopt;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) != pid_) return std::nullopt;
  pid_ = -1;
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void DaemonProcess::kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  wait_for(pid_);
  pid_ = -1;
}

std::string DaemonProcess::log() const {
  std::ifstream in(dir_ + "/irisd.log");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

uint64_t fresh_seed() {
  std::random_device entropy;
  return (uint64_t{entropy()} << 32) | entropy();
}

std::vector<pid_t> start_ranks(const DaemonProcess& daemon, uint32_t nranks,
                               const std::vector<std::string>& args) {
  std::vector<pid_t> pids;
  for (uint32_t r = 0; r < nranks; ++r) {
    std::vector<std::string> argv = {
        rank_program_path(),    "--socket", daemon.socket(),  "--nranks",
        std::to_string(nranks), "--rank",   std::to_string(r)};
    argv.insert(argv.end(), args.begin(), args.end());
    pids.push_back(spawn(argv));
  }
  return pids;
}

std::vector<int> run_ranks(const DaemonProcess& daemon, uint32_t nranks,
                           const std::vector<std::string>& args) {
  std::vector<int> codes;
  for (pid_t p : start_ranks(daemon, nranks, args)) codes.push_back(wait_for(p));
  return codes;
}

}  // namespace iris::testing
