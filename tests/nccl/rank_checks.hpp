// What the cases of iris-test-nccl-rank share (tests/nccl/nccl_rank_main.cpp): the tally of
// checks and mismatches that decides its exit code, and the cases kept in files of their own
// (refusal_checks.cpp, fallback_checks.cpp, abort_checks.cpp).
#pragma once

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "client/nccl/include/nccl.h"

// A call that must succeed: otherwise the rank prints why and exits 1.
#define NCCL_OK(call)                                                                             \
  do {                                                                                            \
    const ncclResult_t r_ = (call);                                                               \
    if (r_ != ncclSuccess) {                                                                      \
      std::printf("FAIL %s:%d %s -> %s: %s\n", __FILE__, __LINE__, #call, ncclGetErrorString(r_), \
                  ncclGetLastError(nullptr));                                                     \
      std::exit(1);                                                                               \
    }                                                                                             \
  } while (0)

namespace iris::nccl_test {

extern std::atomic<long> checks;
extern std::atomic<int> failures;

// Counts a check; prints the first 20 that failed.
void expect(bool ok, const std::string& what);
// A sum all-reduce of int64 on `comm`, checked: each rank contributes rank + 1 + i.
void check_sum(ncclComm_t comm, const char* what);
// Every refusal: its result code, and a reason in ncclGetLastError.
void check_refusals(ncclComm_t comm);
// IRISD_NCCL_FALLBACK at the stand-in (tests/nccl/nccl_stand_in.cpp); `strict`: with
// IRISD_NCCL_STRICT=1.
void check_fallback(ncclComm_t comm, bool strict);
// ncclCommAbort racing calls of other threads (2 ranks; ends `comm`). Rank 0 creates
// `stop_file` when done; rank 1 waits for it.
void check_abort_race(ncclComm_t comm, int rank, const std::string& stop_file);
// ncclCommAbort of a non-blocking init that waits at another node's meeting point for ranks that
// never come (run as the only rank of `nranks` > 1, the id carrying a meeting point).
void check_abort_during_init(const ncclUniqueId& id, int nranks, int rank);

}  // namespace iris::nccl_test
