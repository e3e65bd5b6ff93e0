// Starts a real irisd for a test (fork + exec of the built binary) on a private socket, waits
// until it answers, and stops it at the end.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace iris::testing {

class DaemonProcess {
 public:
  // `extra_args` are appended to irisd's command line.
  explicit DaemonProcess(std::vector<std::string> extra_args = {});
  ~DaemonProcess();
  DaemonProcess(const DaemonProcess&) = delete;
  DaemonProcess& operator=(const DaemonProcess&) = delete;

  const std::string& socket() const { return socket_; }
  const std::string& directory() const { return dir_; }
  pid_t pid() const { return pid_; }
  // The shared memory the daemon maps now (its sealed memfds, by label: "irisd-session-3",
  // "irisd-session-3-buffer-7"), read from /proc/<pid>/maps.
  std::set<std::string> shared_memory() const;

  void start();
  // The irisd binary the next start() runs (an upgrade); irisd_path() until this is called.
  void use_binary(std::string path) { binary_ = std::move(path); }
  // SIGTERM and wait; returns the exit status (128 + signal when irisd died by one: under load
  // that is a crash, which tests that stop irisd assert against).
  int stop();
  // SIGKILL and wait: leaves sockets and segments behind, as a crash would.
  void kill();
  // irisd's exit status (128 + signal) once it has ended on its own, without waiting; nullopt
  // while it runs (or once stopped or killed).
  std::optional<int> ended();
  // The daemon's log so far.
  std::string log() const;

 private:
  std::vector<std::string> args_;
  std::string binary_;
  std::string dir_;
  std::string socket_;
  pid_t pid_ = -1;
};

// Paths of the binaries under test: set by CMake, or all in $IRIS_BIN_DIR when that is set
// (bundles run on another machine, such as the GPU host).
std::string irisd_path();
// irisd built again under another release version (a stand-in for the next release).
std::string irisd_next_path();
std::string iris_ctl_path();
std::string rank_program_path();
std::string gpu_rank_program_path();

// Runs a program, waits, returns its exit status and what it printed on stdout.
struct ProgramResult {
  int exit_code;
  std::string output;
};
ProgramResult run_program(const std::vector<std::string>& argv);

// Starts a program without waiting; returns its pid.
pid_t spawn(const std::vector<std::string>& argv);
// Waits for a spawned pid; returns its exit code, or 128 + signal.
int wait_for(pid_t pid);

// A seed for test data, fresh each run (tests print it so a failure can be replayed).
uint64_t fresh_seed();
// Starts `nranks` iris-test-rank processes against `daemon` (--socket, --nranks and --rank
// filled in, then `args`) and returns their exit codes.
std::vector<int> run_ranks(const DaemonProcess& daemon, uint32_t nranks,
                           const std::vector<std::string>& args);
// The same, without waiting: their pids.
std::vector<pid_t> start_ranks(const DaemonProcess& daemon, uint32_t nranks,
                               const std::vector<std::string>& args);

}  // namespace iris::testing
