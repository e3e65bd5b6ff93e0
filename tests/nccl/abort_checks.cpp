// The abort cases of iris-test-nccl-rank: ncclCommAbort from one thread while another is inside a
// call on the communicator, or holds an operation on it in an open group (abort-race); and
// ncclCommAbort of a non-blocking init still waiting for other nodes' ranks (abort-init).
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>

#include "tests/nccl/rank_checks.hpp"

namespace iris::nccl_test {

namespace {

// What a call on another thread returned, and ncclGetLastError there.
struct Outcome {
  ncclResult_t result = ncclSuccess;
  std::string why;
};

// SIGALRM's handler while an abort must end the init's wait: write(2) is async-signal-safe.
void fail_waited_out(int) {
  static constexpr char kWhy[] =
      "MISMATCH ncclCommAbort did not end the init's wait at the meeting point (watchdog)\n";
  [[maybe_unused]] auto written = ::write(STDOUT_FILENO, kWhy, sizeof(kWhy) - 1);
  ::_exit(1);
}

}  // namespace

void check_abort_race(ncclComm_t comm, int rank, const std::string& stop_file) {
  // A second communicator, for an operation queued in another thread's open group.
  ncclComm_t second = nullptr;
  NCCL_OK(ncclCommSplit(comm, 0, rank, &second, nullptr));
  if (rank != 0) {
    // Rank 1 joins nothing and stays until rank 0 is done, so that nothing but the aborts ends
    // rank 0's calls.
    for (int k = 0; k < 60000 && ::access(stop_file.c_str(), F_OK) != 0; ++k) ::usleep(1000);
    expect(::access(stop_file.c_str(), F_OK) == 0, "rank 0 ended within a minute");
    NCCL_OK(ncclCommAbort(second));
    NCCL_OK(ncclCommAbort(comm));
    return;
  }
  // A worker waits inside an all-reduce that rank 1 never joins; this thread aborts the
  // communicator under it: the call returns ncclInvalidUsage naming the abort, and the abort
  // returns once it left.
  Outcome waiting;
  std::atomic<bool> calling{false};
  std::thread worker([&] {
    int64_t value = 1;
    calling.store(true);
    waiting.result = ncclAllReduce(&value, &value, 1, ncclInt64, ncclSum, comm, nullptr);
    waiting.why = ncclGetLastError(nullptr);
  });
  while (!calling.load()) std::this_thread::yield();
  // Gives the worker time to reach its wait inside the call (the path under test). Nothing
  // asserted depends on it: a call the abort reaches first is refused with the same result and
  // a reason naming the abort.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  NCCL_OK(ncclCommAbort(comm));
  worker.join();
  std::printf("abort-race: %s: %s\n", ncclGetErrorString(waiting.result), waiting.why.c_str());
  expect(waiting.result == ncclInvalidUsage, "the waiting all-reduce fails with ncclInvalidUsage");
  expect(waiting.why.find("ncclCommAbort") != std::string::npos, "its reason names the abort");
  // The abort does not wait for a group that another thread keeps open; the group's end then
  // refuses the operation it held.
  Outcome grouped;
  std::atomic<bool> queued{false}, aborted{false};
  std::thread grouper([&] {
    int64_t value = 1;
    NCCL_OK(ncclGroupStart());
    NCCL_OK(ncclAllReduce(&value, &value, 1, ncclInt64, ncclSum, second, nullptr));
    queued.store(true);
    for (int k = 0; k < 60000 && !aborted.load(); ++k) ::usleep(1000);
    grouped.result = ncclGroupEnd();
    grouped.why = ncclGetLastError(nullptr);
  });
  while (!queued.load()) std::this_thread::yield();
  NCCL_OK(ncclCommAbort(second));
  aborted.store(true);
  grouper.join();
  std::printf("abort-race group: %s: %s\n", ncclGetErrorString(grouped.result),
              grouped.why.c_str());
  expect(
      grouped.result == ncclInvalidUsage && grouped.why.find("ncclCommAbort") != std::string::npos,
      "the group's end refuses the operation on the aborted communicator");
  std::FILE* f = std::fopen(stop_file.c_str(), "w");
  if (f != nullptr) std::fclose(f);
}

void check_abort_during_init(const ncclUniqueId& id, int nranks, int rank) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  expect(ncclCommInitRankConfig(&comm, nranks, id, rank, &config) == ncclInProgress,
         "a non-blocking init returns ncclInProgress");
  ncclResult_t state = ncclSuccess;
  NCCL_OK(ncclCommGetAsyncError(comm, &state));
  expect(state == ncclInProgress, "the init waits for ranks that never come");
  // The meeting's own timeout is 5 minutes: an abort that waited the init out would hold this
  // rank that long, so a watchdog fails it first, with the reason.
  std::signal(SIGALRM, fail_waited_out);
  ::alarm(60);
  NCCL_OK(ncclCommAbort(comm));
  ::alarm(0);
}

}  // namespace iris::nccl_test
