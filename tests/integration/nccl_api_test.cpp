// irisd's libnccl.so.2 against a real irisd (host engine): processes that speak NCCL's C API
// (tests/nccl/nccl_rank_main.cpp) run every operation, datatype and reduction, groups, splits,
// non-blocking init, several ranks in one process, a rank's death and irisd's restarts, each
// checking every byte against its own reference.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <optional>
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
  nccl::make_unique_id(id, "");
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : id) {
    hex += kDigits[c >> 4];
    hex += kDigits[c & 15];
  }
  return hex;
}

// Starts `nranks` rank processes of one job (`extra` appended) and returns their pids; the rank
// program linked against `program`'s library (libnccl.so.2 unless told).
std::vector<pid_t> start_job(const DaemonProcess& daemon, int nranks, const std::string& name,
                             std::vector<std::string> extra = {},
                             const std::string& program = IRIS_TEST_NCCL_RANK) {
  const std::string id = new_id_hex();
  std::vector<pid_t> pids;
  for (int r = 0; r < nranks; ++r) {
    std::vector<std::string> argv = {program,
                                     "--socket",
                                     daemon.socket(),
                                     "--id",
                                     id,
                                     "--nranks",
                                     std::to_string(nranks),
                                     "--rank",
                                     std::to_string(r),
                                     "--case",
                                     name};
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

// Which part moved each operation's bytes reaches iris-ctl stats: here (host engine, host
// memory) irisd's engine for the gathers and the host for the reductions' local steps and for
// staging the malloc memory.
TEST(NcclApi, EveryOperationDatatypeAndReductionMatchesItsReference) {
  DaemonProcess daemon;
  expect_all_pass(start_job(daemon, 3, "ops"), daemon);
  std::map<std::string, nlohmann::json> by_op;
  const auto rows = ctl_json(daemon, {"stats"})["api_operations"];
  for (const auto& row : rows) by_op[row["op"].get<std::string>()] = row;
  for (const char* op : {"all_gather", "all_reduce", "reduce_scatter", "reduce", "broadcast",
                         "all_to_all", "gather", "scatter", "send", "recv"}) {
    ASSERT_EQ(by_op.count(op), 1u) << op << " in " << rows.dump();
    EXPECT_GT(uint64_t(by_op[op]["calls"]), 0u) << op;
    EXPECT_EQ(by_op[op]["sm_kernel_bytes"], 0) << op << ": no GPU here";
  }
  EXPECT_GT(uint64_t(by_op["all_gather"]["irisd_bytes"]), 0u);
  EXPECT_GT(uint64_t(by_op["all_gather"]["host_bytes"]), 0u) << "malloc memory is staged";
  EXPECT_GT(uint64_t(by_op["all_reduce"]["irisd_bytes"]), 0u);
  EXPECT_GT(uint64_t(by_op["all_reduce"]["host_bytes"]), 0u);
}

// Host memory irisd cannot see is staged by the host: the tally counts those copies as the host's.
// Each of 2 ranks all-gathers kStagedCount int32 once in ncclMemAlloc memory and once in malloc
// memory; staging the second copies the send in (kStagedBytes) and the receive range of both
// ranks (2 x kStagedBytes) in and back out. Runs that job (`extra` appended) and checks the
// all-gathers' row of api_operations, returned.
constexpr uint64_t kStagedCount = 1000, kStagedBytes = kStagedCount * sizeof(int32_t);
nlohmann::json expect_staged_job_counted(const DaemonProcess& daemon,
                                         std::vector<std::string> extra) {
  extra.insert(extra.end(), {"--count", std::to_string(kStagedCount)});
  expect_all_pass(start_job(daemon, 2, "staged", extra), daemon);
  const auto rows = ctl_json(daemon, {"stats"})["api_operations"];
  const auto row = std::find_if(rows.begin(), rows.end(),
                                [](const nlohmann::json& r) { return r["op"] == "all_gather"; });
  if (row == rows.end()) {
    ADD_FAILURE() << "no all_gather row: " << rows.dump();
    return {};
  }
  EXPECT_EQ((*row)["calls"], 4);
  EXPECT_EQ((*row)["host_bytes"], 2 * (kStagedBytes + 2 * 2 * kStagedBytes));
  return *row;
}

TEST(NcclApi, HostCopiesStagingMemoryIrisdCannotSeeCountAsTheHosts) {
  DaemonProcess daemon;
  const nlohmann::json row = expect_staged_job_counted(daemon, {});
  if (row.is_null()) return;
  EXPECT_EQ(row["sm_kernel_bytes"], 0);
  EXPECT_GT(uint64_t(row["irisd_bytes"]), 0u);
}

// A process that exits without ending its communicator (JAX never does) still reports every
// operation: without the report at exit, irisd heard of each rank's first all-gather only (the
// counts go at most once a second while a communicator runs).
TEST(NcclApi, AProcessExitingWithItsCommunicatorAliveReportsEveryOperation) {
  DaemonProcess daemon;
  expect_staged_job_counted(daemon, {"--keep-comm", "1"});
}

// The RCCL build (librccl.so.1, its GPU side over HIP) answers the same API: every operation,
// datatype and reduction on host memory, and every refusal with its reason. (AMD GPUs: not run.)
TEST(NcclApi, TheRcclBuildRunsEveryOperationAndRefusal) {
#ifndef IRIS_TEST_RCCL_RANK
  GTEST_SKIP() << "built without ROCm's HIP headers: no librccl.so.1 to test";
#else
  DaemonProcess daemon;
  expect_all_pass(start_job(daemon, 3, "ops", {}, IRIS_TEST_RCCL_RANK), daemon);
  expect_all_pass(start_job(daemon, 2, "refusals", {}, IRIS_TEST_RCCL_RANK), daemon);
  const ProgramResult linked = run_program({"/usr/bin/ldd", IRIS_TEST_RCCL_RANK});
  EXPECT_NE(linked.output.find("librccl.so.1"), std::string::npos) << linked.output;
  EXPECT_EQ(linked.output.find("libnccl.so"), std::string::npos) << linked.output;
#endif
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

// ncclCommAbort from one thread while another waits inside an operation on the communicator
// (NCCL allows it): the waiting call leaves with ncclInvalidUsage naming the abort, and the
// communicator is freed only after it left.
TEST(NcclApi, AnAbortFromAnotherThreadEndsACallWaitingInside) {
  DaemonProcess daemon;
  expect_all_pass(
      start_job(daemon, 2, "abort-race", {"--stop-file", daemon.directory() + "/rank0-done"}),
      daemon);
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

// Environment variables set for the rank processes a test starts, unset after it.
class ScopedEnv {
 public:
  explicit ScopedEnv(std::vector<std::pair<std::string, std::string>> vars)
      : vars_(std::move(vars)) {
    for (const auto& [k, v] : vars_) ::setenv(k.c_str(), v.c_str(), 1);
  }
  ~ScopedEnv() {
    for (const auto& [k, v] : vars_) ::unsetenv(k.c_str());
  }

 private:
  std::vector<std::pair<std::string, std::string>> vars_;
};

// The sanitizers' runtimes refuse (abort) a dlopen with RTLD_DEEPBIND, which the fallback needs
// (google/sanitizers#611): the fallback's tests run in the plain build.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SKIP_UNDER_SANITIZERS()                                                                   \
  GTEST_SKIP() << "a sanitizer runtime aborts a dlopen with RTLD_DEEPBIND; the plain build runs " \
                  "it"
#else
#define SKIP_UNDER_SANITIZERS()
#endif

// A fallback NCCL (here the stand-in of tests/nccl/nccl_stand_in.cpp, on the GPU host the real
// one) takes the operations IRISD_NCCL_FALLBACK_OPS names, and its bytes are counted apart.
// A shell that preloads irisd's library for its jobs (export LD_PRELOAD=.../libnccl.so.2) runs
// irisd and iris-ctl with it too: libiris comes in beside their own copy of the attach protocol's
// messages, and both must start and answer (they aborted at start when both registered them).
TEST(NcclApi, IrisdAndIrisCtlRunWithTheLibraryPreloaded) {
  std::string preload = IRIS_TEST_LIBNCCL;
  if (const char* sanitizers = std::getenv("IRIS_TEST_PRELOAD"))
    preload = std::string(sanitizers) + ":" + preload;  // a sanitizer's runtime must come first
  const char* before = std::getenv("LD_PRELOAD");
  const std::string saved = before ? before : "";
  ::setenv("LD_PRELOAD", preload.c_str(), 1);
  std::optional<DaemonProcess> daemon;
  std::string what;
  try {
    daemon.emplace();
  } catch (const std::exception& e) {
    what = e.what();
  }
  const ProgramResult status =
      daemon ? run_program({iris_ctl_path(), "--socket", daemon->socket(), "status"})
             : ProgramResult{-1, ""};
  if (before)
    ::setenv("LD_PRELOAD", saved.c_str(), 1);
  else
    ::unsetenv("LD_PRELOAD");
  ASSERT_TRUE(daemon) << "irisd did not start with " << preload << " preloaded: " << what;
  EXPECT_EQ(status.exit_code, 0) << status.output << daemon->log();
  EXPECT_NE(status.output.find("SERVING"), std::string::npos) << status.output;
  expect_all_pass(start_job(*daemon, 2, "ops"), *daemon);
}

TEST(NcclApi, AFallbackNcclTakesTheOperationsNamedAndItsBytesAreCountedApart) {
  SKIP_UNDER_SANITIZERS();
  DaemonProcess daemon;
  {
    ScopedEnv env({{"IRISD_NCCL_FALLBACK", IRIS_TEST_NCCL_STAND_IN},
                   {"IRISD_NCCL_FALLBACK_OPS", "all_reduce,reduce"}});
    expect_all_pass(start_job(daemon, 1, "fallback"), daemon);
  }
  std::map<std::string, nlohmann::json> by_op;
  const auto rows = ctl_json(daemon, {"stats"})["api_operations"];
  for (const auto& row : rows) by_op[row["op"].get<std::string>()] = row;
  ASSERT_EQ(by_op.count("all_reduce"), 1u) << rows.dump();
  EXPECT_EQ(by_op["all_reduce"]["calls"], 3) << rows.dump();  // 2 on the fallback, 1 on irisd
  EXPECT_EQ(by_op["all_reduce"]["fallback_bytes"], 2 * 4096) << rows.dump();
  EXPECT_EQ(by_op["reduce_scatter"]["fallback_bytes"], 0) << rows.dump();
  EXPECT_GT(uint64_t(by_op["reduce_scatter"]["irisd_bytes"]), 0u) << rows.dump();
  EXPECT_GT(uint64_t(by_op["all_gather"]["irisd_bytes"]), 0u) << rows.dump();

  ScopedEnv strict({{"IRISD_NCCL_FALLBACK", IRIS_TEST_NCCL_STAND_IN},
                    {"IRISD_NCCL_FALLBACK_OPS", "reductions"},
                    {"IRISD_NCCL_STRICT", "1"}});
  expect_all_pass(start_job(daemon, 1, "fallback-strict"), daemon);
}

TEST(NcclApi, AnUnusableFallbackFailsInitNamingIt) {
  SKIP_UNDER_SANITIZERS();
  DaemonProcess daemon;
  for (const auto& [path, ops] : std::vector<std::pair<std::string, std::string>>{
           {"/nonexistent/libnccl.so.2", "reductions"},
           {IRIS_TEST_LIBNCCL, "reductions"},        // this library itself
           {IRIS_TEST_NCCL_STAND_IN, "all_gather"},  // lacks ncclAllGather
           {IRIS_TEST_NCCL_STAND_IN, "all_reduce,summing"}}) {
    ScopedEnv env({{"IRISD_NCCL_FALLBACK", path}, {"IRISD_NCCL_FALLBACK_OPS", ops}});
    expect_all_pass(start_job(daemon, 1, "fallback-unusable"), daemon);
  }
}

// Two irisd daemons as two nodes: ranks alternate between them and share nothing but the id
// rank 0 got from ncclGetUniqueId, which carries node 0's meeting point. They meet there, make
// one communicator across both daemons, and run `name` (splits make children within a node and
// across both).
void expect_job_across_two_nodes(int nranks, const std::string& name) {
  DaemonProcess node0({"--meeting-address", "127.0.0.1:0"}), node1;
  const std::string meeting = ctl_json(node0, {"status"})["irisd"]["meeting_point"];
  ASSERT_NE(meeting, "off") << node0.log();
  const std::string id_file = node0.directory() + "/nccl-id";
  std::vector<pid_t> pids;
  for (int r = 0; r < nranks; ++r)
    pids.push_back(spawn({IRIS_TEST_NCCL_RANK, "--socket", (r % 2 == 0 ? node0 : node1).socket(),
                          "--id-file", id_file, "--nranks", std::to_string(nranks), "--rank",
                          std::to_string(r), "--case", name}));
  for (std::size_t r = 0; r < pids.size(); ++r)
    EXPECT_EQ(wait_for(pids[r]), 0) << "rank " << r << " failed (its output is above)\nnode 0:\n"
                                    << node0.log() << "\nnode 1:\n"
                                    << node1.log();
}

// A non-blocking init across nodes waits at node 0's meeting point (5 minutes at most) for ranks
// that never come: ncclCommAbort ends that wait instead of waiting it out, and irisd serves the
// next job.
TEST(NcclApi, AnAbortEndsANonBlockingInitWaitingAtTheMeetingPoint) {
  DaemonProcess node0({"--meeting-address", "127.0.0.1:0"});
  const std::string id_file = node0.directory() + "/nccl-id";
  const pid_t alone = spawn({IRIS_TEST_NCCL_RANK, "--socket", node0.socket(), "--id-file", id_file,
                             "--nranks", "2", "--rank", "0", "--case", "abort-init"});
  EXPECT_EQ(wait_for(alone), 0) << node0.log();
  expect_all_pass(start_job(node0, 2, "nonblocking"), node0);
}

// Every collective, datatype and reduction across the nodes; a send is refused with the reason.
TEST(NcclApi, ACommunicatorSpansTwoDaemonsAsTwoNodes) {
  expect_job_across_two_nodes(4, "ops-across-nodes");
}

TEST(NcclApi, SplitsOfACommunicatorAcrossNodesSpanTheNodesOfTheirRanks) {
  expect_job_across_two_nodes(5, "split");
}

}  // namespace
}  // namespace iris::testing
