// The refusals case of iris-test-nccl-rank: every bad call the library must refuse, with its
// result code and a reason in ncclGetLastError, and the communicator still working after them.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tests/nccl/rank_checks.hpp"

namespace iris::nccl_test {

void check_refusals(ncclComm_t comm) {
  auto refused = [](ncclResult_t got, ncclResult_t want, const std::string& what) {
    const std::string why = ncclGetLastError(nullptr);
    expect(got == want, what + ": got " + ncclGetErrorString(got) + " (" + why + ")");
    expect(!why.empty(), what + " has a reason");
    std::printf("refused %s: %s\n", what.c_str(), why.c_str());
  };
  int64_t a[4] = {}, b[16] = {};
  refused(ncclAllReduce(a, b, 4, static_cast<ncclDataType_t>(12), ncclSum, comm, nullptr),
          ncclInvalidArgument, "an unknown datatype");
  refused(ncclAllReduce(a, b, 4, ncclInt64, static_cast<ncclRedOp_t>(77), comm, nullptr),
          ncclInvalidArgument, "an unknown reduction");
  refused(ncclBroadcast(a, b, 4, ncclInt64, 5, comm, nullptr), ncclInvalidArgument,
          "a root that is no rank");
  refused(ncclSend(a, 4, ncclInt64, -1, comm, nullptr), ncclInvalidArgument,
          "a peer that is no rank");
  refused(ncclAllGather(nullptr, b, 4, ncclInt64, comm, nullptr), ncclInvalidArgument,
          "a NULL send buffer");
  refused(ncclAllGather(a, b, SIZE_MAX / 2, ncclInt64, comm, nullptr), ncclInvalidArgument,
          "a count whose size overflows");
  refused(ncclAllGather(a, b, 4, ncclInt64, nullptr, nullptr), ncclInvalidArgument,
          "a NULL communicator");
  refused(ncclGroupEnd(), ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  ncclRedOp_t op;
  int64_t two = 2;
  NCCL_OK(ncclRedOpCreatePreMulSum(&op, &two, ncclInt64, ncclScalarHostImmediate, comm));
  refused(ncclAllReduce(a, b, 4, ncclFloat32, op, comm, nullptr), ncclInvalidArgument,
          "a PreMulSum of another datatype");
  NCCL_OK(ncclRedOpDestroy(op, comm));
  refused(ncclRedOpDestroy(op, comm), ncclInvalidArgument, "destroying a reduction twice");
  ncclUniqueId foreign;
  std::memset(foreign.internal, 0x5a, sizeof foreign.internal);
  ncclComm_t other = nullptr;
  refused(ncclCommInitRank(&other, 2, foreign, 0), ncclInvalidArgument,
          "an id this library did not make");
  refused(ncclCommInitRank(&other, 2, foreign, 2), ncclInvalidArgument, "a rank past nranks");
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.magic = 0;
  ncclUniqueId id;
  NCCL_OK(ncclGetUniqueId(&id));
  refused(ncclCommInitRankConfig(&other, 1, id, 0, &config), ncclInvalidArgument,
          "a config not made with NCCL_CONFIG_INITIALIZER");
  ncclConfig_t classed = NCCL_CONFIG_INITIALIZER;
  classed.trafficClass = 5;
  refused(ncclCommInitRankConfig(&other, 1, id, 0, &classed), ncclInvalidArgument,
          "a traffic class irisd does not have");
  for (const char* name : {"IRISD_NCCL_TRAFFIC_CLASS", "IRISD_NCCL_SHARED_GPU"}) {
    ::setenv(name, "sometimes", 1);
    refused(ncclCommInitRank(&other, 1, id, 0), ncclInvalidArgument,
            std::string(name) + "=sometimes");
    expect(std::string(ncclGetLastError(nullptr)).find(name) != std::string::npos,
           std::string("the reason names ") + name);
    ::unsetenv(name);
  }
  refused(ncclDevCommCreate(comm, nullptr, nullptr), ncclInvalidUsage, "the device API");
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  refused(ncclGroupSimulateEnd(&sim), ncclInvalidUsage, "a simulated group");
  int version = 0;
  NCCL_OK(ncclGetVersion(&version));
  expect(version == NCCL_VERSION_CODE && version >= 22800, "the version is NCCL 2.28's API");
  // Windows and registrations are accepted and change nothing.
  void* handle = nullptr;
  NCCL_OK(ncclCommRegister(comm, a, sizeof a, &handle));
  NCCL_OK(ncclCommDeregister(comm, handle));
  ncclWindow_t win = nullptr;
  NCCL_OK(ncclCommWindowRegister(comm, a, sizeof a, &win, 0));
  NCCL_OK(ncclCommWindowDeregister(comm, win));
  // The communicator still works after every refusal.
  check_sum(comm, "AllReduce after the refusals");
}

}  // namespace iris::nccl_test
