// A real NCCL (or RCCL) beside irisd, for the operations the user names: IRISD_NCCL_FALLBACK is
// its path, IRISD_NCCL_FALLBACK_OPS the operations it takes (default: the reductions, which
// irisd runs as copies plus a kernel). It is loaded with RTLD_LOCAL | RTLD_DEEPBIND, so that its
// nccl* names never meet this library's (preloaded, ours come first for everyone else) and its
// own calls to them stay inside it; one table of its functions, as NCCL's *wrap.cc loaders do.
// Nothing it moves is silent: its bytes are counted apart (iris-ctl stats `fallback_bytes`),
// IRISD_NCCL_STRICT=1 refuses it, and NCCL_DEBUG=INFO names it per communicator.
#pragma once

#include <bitset>
#include <string>

#include "client/nccl/include/nccl.h"
#include "client/nccl/operation_plan.hpp"

namespace iris::nccl {

struct FallbackNccl {
  std::string path;
  std::bitset<kOpKindCount> takes;  // by OpKind
  int version = 0;

  ncclResult_t (*GetUniqueId)(ncclUniqueId*);
  ncclResult_t (*CommInitRank)(ncclComm_t*, int, ncclUniqueId, int);
  ncclResult_t (*CommSplit)(ncclComm_t, int, int, ncclComm_t*, ncclConfig_t*);
  ncclResult_t (*CommFinalize)(ncclComm_t);
  ncclResult_t (*CommDestroy)(ncclComm_t);
  ncclResult_t (*CommAbort)(ncclComm_t);
  ncclResult_t (*CommGetAsyncError)(ncclComm_t, ncclResult_t*);
  const char* (*GetLastError)(ncclComm_t);
  ncclResult_t (*GroupStart)();
  ncclResult_t (*GroupEnd)();
  ncclResult_t (*AllGather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*AllReduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                            cudaStream_t);
  ncclResult_t (*ReduceScatter)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                cudaStream_t);
  ncclResult_t (*Reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t,
                         cudaStream_t);
  ncclResult_t (*Broadcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t,
                            cudaStream_t);
  ncclResult_t (*AlltoAll)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*Gather)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*Scatter)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t,
                          cudaStream_t);
  ncclResult_t (*Send)(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*Recv)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);

  // Runs `kind` on the fallback's communicator `comm` (the arguments as the API received them);
  // throws NcclError with the fallback's own message when it fails.
  void run(OpKind kind, const void* send, void* recv, size_t count, ncclDataType_t type,
           ncclRedOp_t op, int peer, ncclComm_t comm, cudaStream_t stream) const;
  // Throws NcclError(result, what + the fallback's last error) unless `result` is ncclSuccess.
  void check(ncclResult_t result, const std::string& what, ncclComm_t comm = nullptr) const;
};

// The process's fallback, loaded on first use; nullptr when IRISD_NCCL_FALLBACK is unset. Throws
// NcclError(ncclSystemError) naming the path when it cannot be loaded, lacks a function the
// named operations need, or is this library itself.
const FallbackNccl* fallback_nccl();

// The operations a comma list names (all_reduce, reduce_scatter, ... as iris-ctl stats shows
// them; "reductions" for the three reductions); throws NcclError(ncclInvalidArgument) naming an
// unknown one.
std::bitset<kOpKindCount> parse_fallback_ops(const std::string& list);

}  // namespace iris::nccl
