// irisd's libnccl.so.2 against a real irisd (host engine): processes that speak NCCL's C API
// (tests/nccl/nccl_rank_main.cpp) run every operation, datatype and reduction, groups, splits,
// non-blocking init, several ranks in one process, a rank's death and irisd's restarts, each
// checking every byte against its own reference.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "client/nccl/unique_id.hpp"
#include "tests/support/ctl_json.hpp"
#include "tests/support/daemon_process.hpp"

namespace iris::testing {
namespace {

using namespace std::chrono_literals;

std::string new_id_hex() {
  char id[nccl::kUniqueIdBytes];
  nccl::make_unique_id(id);
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : id) {
    hex += kDigits[c >> 4];
    hex += kDigits[c & 15];
  }
  return hex;
}

// Starts `nranks` rank processes of one job (`extra` appended) and returns their pids.
std::vector<pid_t> start_job(const DaemonProcess& daemon, int nranks, const std::string& name,
                             std::vector<std::string> extra = {}) {
  const std::string id = new_id_hex();
  std::vector<pid_t> pids;
  for (int r = 0; r < nranks; ++r) {
    std::vector<std::string> argv = {
        IRIS_TEST_NCCL_RANK,    "--socket", daemon.socket(),   "--id",   id,  "--nranks",
        std::to_string(nranks), "--rank",   std::to_string(r), "--case", name};
    argv.insert(argv.end(), extra.begin(), extra.end());
    pids.push_back(spawn(argv));
  }
  return pids;
}

void expect_all_pass(const std::vector<pid_t>& pids, const DaemonProcess& daemon) {
  for (std::size_t r = 0; r < pids.size(); ++r)
    EXPECT_EQ(wait_for(pids[r]), 0) << "rank " << r << " failed (its output is above)\n"
                                    << daemon.log();
}

TEST(NcclApi, EveryOperationDatatypeAndReductionMatchesItsReference) {
  DaemonProcess daemon;
  expect_all_pass(start_job(daemon, 3, "ops"), daemon);
}

TEST(NcclApi, OneRankRunsEveryOperationAlone) {
  DaemonProcess daemon;
  expect_all_pass(start_job(daemon, 1, "ops"), daemon);
}

TEST(NcclApi, AGroupMixesReductionsGathersAndPointToPoint) {
  DaemonProcess daemon;
  expect_all_pass(start_job(daemon, 4, "group"), daemon);
}

TEST(NcclApi, SplitMakesACommunicatorOfEachColorOrderedByKey) {
  DaemonProcess daemon;
  expect_all_pass(start_job(daemon, 5, "split"), daemon);
}

TEST(NcclApi, NonBlockingInitIsPolledToSuccess) {
  DaemonProcess daemon;
  expect_all_pass(start_job(daemon, 2, "nonblocking"), daemon);
}

TEST(NcclApi, SeveralRanksInOneProcessEachTakeASessionOfTheirOwn) {
  DaemonProcess daemon;
  expect_all_pass(start_job(daemon, 1, "threads", {"--nranks", "3", "--rank", "0"}), daemon);
}

TEST(NcclApi, BadCallsAreRefusedWithTheirReason) {
  DaemonProcess daemon;
  expect_all_pass(start_job(daemon, 1, "refusals"), daemon);
}

// NCCL reports a rank's death as ncclRemoteError, on the call and through
// ncclCommGetAsyncError, with irisd's reason in ncclGetLastError.
TEST(NcclApi, ARanksDeathIsARemoteErrorCarryingIrisdsReason) {
  DaemonProcess daemon;
  expect_all_pass(start_job(daemon, 3, "survivor"), daemon);
}

// A restart of irisd is a pause for communicators made through the NCCL API too: the job's
// all-reduces go on, every one checked, through a SIGKILL, a stop and another SIGKILL.
TEST(NcclApi, AJobComesThroughRestartsOfIrisd) {
  DaemonProcess daemon({"--resume-window-ms", "60000"});
  const std::string stop = daemon.directory() + "/stop";
  const auto pids = start_job(daemon, 3, "loops", {"--stop-file", stop});
  for (int k = 0; k < 3; ++k) {
    std::this_thread::sleep_for(200ms);
    if (k == 1)
      EXPECT_EQ(daemon.stop(), 0) << daemon.log();
    else
      daemon.kill();
    daemon.start();
  }
  std::this_thread::sleep_for(200ms);
  for (pid_t pid : pids) EXPECT_EQ(::waitpid(pid, nullptr, WNOHANG), 0) << "a rank ended early";
  // Every rank's session came back to the last irisd.
  EXPECT_GE(uint64_t(ctl_json(daemon, {"stats"})["stats"]["sessions_resumed_total"]), 3u);
  std::ofstream(stop).put('x');
  expect_all_pass(pids, daemon);
}

}  // namespace
}  // namespace iris::testing
