// The fallback cases of iris-test-nccl-rank: with IRISD_NCCL_FALLBACK at the stand-in
// (tests/nccl/nccl_stand_in.cpp) taking all_reduce and reduce, those go to it (its call count
// rises, the data is right), the rest to irisd, a custom reduction stays on irisd, and the
// stand-in's group spans ours. With IRISD_NCCL_STRICT=1 the operations it would take are
// refused, naming it.
#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "tests/nccl/rank_checks.hpp"

namespace iris::nccl_test {

void check_fallback(ncclComm_t comm, bool strict) {
  void* stand_in = ::dlopen(std::getenv("IRISD_NCCL_FALLBACK"), RTLD_NOW | RTLD_NOLOAD);
  expect(stand_in != nullptr, "the fallback is loaded");
  auto calls = reinterpret_cast<int (*)()>(::dlsym(stand_in, "nccl_stand_in_calls"));
  auto depth = reinterpret_cast<int (*)()>(::dlsym(stand_in, "nccl_stand_in_group_depth"));
  constexpr size_t kCount = 1024;
  std::vector<int32_t> a(kCount), b(kCount, -1), c(kCount, -1);
  for (size_t i = 0; i < kCount; ++i) a[i] = static_cast<int32_t>(7 * i + 1);
  if (strict) {
    expect(ncclAllReduce(a.data(), b.data(), kCount, ncclInt32, ncclSum, comm, nullptr) ==
                   ncclInvalidUsage &&
               std::strstr(ncclGetLastError(nullptr), "fallback") != nullptr,
           "strict mode refuses what the fallback would run");
    expect(calls() == 0, "nothing reached the fallback");
    NCCL_OK(ncclAllGather(a.data(), b.data(), kCount, ncclInt32, comm, nullptr));
    expect(b == a, "AllGather on irisd in strict mode");
    return;
  }
  const int before = calls();
  NCCL_OK(ncclAllReduce(a.data(), b.data(), kCount, ncclInt32, ncclSum, comm, nullptr));
  expect(b == a && calls() == before + 1, "AllReduce ran on the fallback");
  NCCL_OK(ncclReduceScatter(a.data(), c.data(), kCount, ncclInt32, ncclSum, comm, nullptr));
  expect(c == a && calls() == before + 1, "ReduceScatter ran on irisd");
  ncclRedOp_t premul;
  int32_t two = 2;
  NCCL_OK(ncclRedOpCreatePreMulSum(&premul, &two, ncclInt32, ncclScalarHostImmediate, comm));
  NCCL_OK(ncclAllReduce(a.data(), c.data(), kCount, ncclInt32, premul, comm, nullptr));
  for (size_t i = 0; i < kCount; ++i) expect(c[i] == 2 * a[i], "PreMulSum on irisd");
  expect(calls() == before + 1, "a custom reduction stays on irisd");
  NCCL_OK(ncclRedOpDestroy(premul, comm));
  std::fill(b.begin(), b.end(), -1);
  std::fill(c.begin(), c.end(), -1);
  NCCL_OK(ncclGroupStart());
  expect(depth() == 1, "the fallback's group opens with ours");
  NCCL_OK(ncclAllReduce(a.data(), b.data(), kCount, ncclInt32, ncclSum, comm, nullptr));
  NCCL_OK(ncclAllGather(a.data(), c.data(), kCount, ncclInt32, comm, nullptr));
  NCCL_OK(ncclGroupEnd());
  expect(depth() == 0 && b == a && c == a && calls() == before + 2, "a group on both");
}

}  // namespace iris::nccl_test
