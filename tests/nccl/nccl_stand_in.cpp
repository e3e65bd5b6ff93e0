// A stand-in for a real NCCL as IRISD_NCCL_FALLBACK, for the CI host that has neither a GPU nor
// NCCL: the same C names, one rank per communicator (a collective of one rank copies its send
// buffer), host memory. It lets the tests check what the library does with a fallback (which
// operations go there, the fallback's group around ours, its errors, the counts) without a GPU;
// the real NCCL is the fallback on the GPU host. Its ncclGetVersion answers 99999: if the
// library's loader let our symbols shadow its own, its init would see 22800 and fail, saying so.
#include <cstring>
#include <string>

#include "client/nccl/include/nccl.h"

namespace {

struct StandInComm {
  int nranks;
};
int calls = 0;
int group_depth = 0;
std::string last_error;

ncclResult_t refuse(const std::string& why) {
  last_error = why;
  return ncclInvalidUsage;
}

std::size_t size_of(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    default:
      return 8;
  }
}

ncclResult_t copy(const void* send, void* recv, std::size_t count, ncclDataType_t t,
                  ncclComm_t comm) {
  if (comm == nullptr) return refuse("stand-in: NULL communicator");
  ++calls;
  if (send != recv) std::memmove(recv, send, count * size_of(t));
  return ncclSuccess;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int nccl_stand_in_calls() { return calls; }
__attribute__((visibility("default"))) int nccl_stand_in_group_depth() { return group_depth; }

ncclResult_t ncclGetVersion(int* version) {
  *version = 99999;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::memset(id->internal, 0, sizeof id->internal);
  std::memcpy(id->internal, "stand-in", 8);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  int version = 0;
  ncclGetVersion(&version);  // through the PLT: DEEPBIND keeps it ours
  if (version != 99999) return refuse("stand-in: its own ncclGetVersion was shadowed");
  if (std::memcmp(id.internal, "stand-in", 8) != 0) return refuse("stand-in: not its id");
  if (nranks != 1 || rank != 0) return refuse("stand-in: one rank per communicator only");
  *comm = reinterpret_cast<ncclComm_t>(new StandInComm{nranks});
  return ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t, int, int, ncclComm_t*, ncclConfig_t*) {
  return refuse("stand-in: no split");
}
ncclResult_t ncclCommFinalize(ncclComm_t) { return ncclSuccess; }
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  delete reinterpret_cast<StandInComm*>(comm);
  return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t comm) { return ncclCommDestroy(comm); }
ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t* state) {
  *state = ncclSuccess;
  return ncclSuccess;
}
const char* ncclGetLastError(ncclComm_t) { return last_error.c_str(); }
ncclResult_t ncclGroupStart() {
  ++group_depth;
  return ncclSuccess;
}
ncclResult_t ncclGroupEnd() {
  if (group_depth == 0) return refuse("stand-in: ncclGroupEnd without ncclGroupStart");
  --group_depth;
  return ncclSuccess;
}
ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t t,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t) {
  if (op != ncclSum && op != ncclMax && op != ncclMin && op != ncclProd && op != ncclAvg)
    return refuse("stand-in: reduction " + std::to_string(static_cast<int>(op)));
  return copy(send, recv, count, t, comm);
}
ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t t,
                               ncclRedOp_t, ncclComm_t comm, cudaStream_t) {
  return copy(send, recv, count, t, comm);
}
ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t,
                        int, ncclComm_t comm, cudaStream_t) {
  return copy(send, recv, count, t, comm);
}

}  // extern "C"
