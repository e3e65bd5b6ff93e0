// NCCL's operations (collectives, point to point), groups and the reductions made per
// communicator. Each call is checked here, planned (operation_plan.hpp), and run at once or, in a
// group, at the outermost ncclGroupEnd (operation_runner.hpp).
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "client/nccl/fallback_nccl.hpp"
#include "client/nccl/gpu_context.hpp"
#include "client/nccl/nccl_errors.hpp"
#include "client/nccl/operation_runner.hpp"

using iris::nccl::guarded;
using iris::nccl::NcclError;
using iris::nccl::OpCall;
using iris::nccl::OpKind;

namespace {

struct Group {
  int depth = 0;
  std::vector<iris::nccl::QueuedOp> ops;
};
thread_local Group group;

// IRISD_NCCL_STRICT=1: an operation that would move data with a kernel on the GPU's SMs is an
// error naming it, for users who need every byte on the copy engines.
bool strict() {
  static const bool on = [] {
    const char* v = std::getenv("IRISD_NCCL_STRICT");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return on;
}

iris::nccl::ElementType checked_type(ncclDataType_t datatype) {
  const auto type = iris::nccl::element_type(static_cast<int>(datatype));
  if (!type)
    throw NcclError(ncclInvalidArgument, "datatype " + std::to_string(static_cast<int>(datatype)) +
                                             " is no ncclDataType_t (0 to " +
                                             std::to_string(iris::nccl::kElementTypeCount - 1) +
                                             ")");
  return *type;
}

iris::nccl::Reduction checked_reduction(ncclComm& comm, ncclRedOp_t op,
                                        iris::nccl::ElementType type) {
  using iris::nccl::ReduceKind;
  const int value = static_cast<int>(op);
  if (value >= 0 && value < ncclNumOps) return {static_cast<ReduceKind>(value)};
  auto it = comm.custom_ops.find(value);
  if (it == comm.custom_ops.end())
    throw NcclError(ncclInvalidArgument,
                    "reduction " + std::to_string(value) +
                        " is neither an ncclRedOp_t nor one ncclRedOpCreatePreMulSum made for "
                        "this communicator");
  if (it->second.type != type)
    throw NcclError(ncclInvalidArgument, std::string("reduction ") + std::to_string(value) +
                                             " was made for " +
                                             iris::nccl::element_name(it->second.type) + ", not " +
                                             iris::nccl::element_name(type));
  return it->second.reduction;
}

void check_peer(const ncclComm& comm, int peer, const char* what) {
  if (peer < 0 || static_cast<uint32_t>(peer) >= comm.nranks)
    throw NcclError(ncclInvalidArgument, std::string(what) + " " + std::to_string(peer) +
                                             " is not a rank of the communicator (nranks " +
                                             std::to_string(comm.nranks) + ")");
}

// Checks, plans and runs (or queues, in a group) one operation.
ncclResult_t enqueue(ncclComm* comm, OpKind kind, const void* send, void* recv, size_t count,
                     ncclDataType_t datatype, ncclRedOp_t op, int peer, cudaStream_t stream) {
  iris::nccl::CommCall inside(comm, iris::nccl::op_name(kind));
  comm->check_usable(iris::nccl::op_name(kind));
  OpCall call;
  call.kind = kind;
  call.send = send;
  call.recv = recv;
  call.count = count;
  call.type = checked_type(datatype);
  if (iris::nccl::reduces(kind)) call.reduction = checked_reduction(*comm, op, call.type);
  const bool rooted = kind == OpKind::kReduce || kind == OpKind::kBroadcast ||
                      kind == OpKind::kGather || kind == OpKind::kScatter;
  if (rooted) check_peer(*comm, peer, "root");
  if (kind == OpKind::kSend || kind == OpKind::kRecv) {
    check_peer(*comm, peer, "peer");
    if (comm->nodes)
      throw NcclError(ncclInvalidUsage,
                      std::string(iris::nccl::op_name(kind)) + ": this communicator spans " +
                          std::to_string(comm->nodes->addresses.size()) +
                          " nodes, and irisd runs sends and receives within one node only (yet); "
                          "collectives run across nodes");
  }
  call.peer = static_cast<uint32_t>(peer);
  auto plan = iris::nccl::plan_operation(call, comm->nranks, comm->rank);
  if (!plan)
    throw NcclError(ncclInvalidArgument, std::string(iris::nccl::op_name(kind)) + " of " +
                                             std::to_string(count) +
                                             " elements overflows 64-bit sizes");
  if (plan->send_bytes > 0 && send == nullptr)
    throw NcclError(ncclInvalidArgument,
                    std::string(iris::nccl::op_name(kind)) + ": sendbuff is NULL");
  if (plan->recv_bytes > 0 && recv == nullptr)
    throw NcclError(ncclInvalidArgument,
                    std::string(iris::nccl::op_name(kind)) + ": recvbuff is NULL");
  if (comm->fallback != nullptr) {
    const iris::nccl::FallbackNccl* fb = iris::nccl::fallback_nccl();
    const bool custom = iris::nccl::reduces(kind) && static_cast<int>(op) >= ncclNumOps;
    if (fb->takes.test(static_cast<int>(kind)) && !custom) {
      if (strict())
        throw NcclError(ncclInvalidUsage, std::string("IRISD_NCCL_STRICT=1: ") +
                                              iris::nccl::op_name(kind) +
                                              " would run on the fallback NCCL (" + fb->path +
                                              "), its kernels on the GPU's SMs; leave it out of "
                                              "IRISD_NCCL_FALLBACK_OPS or unset IRISD_NCCL_STRICT");
      fb->run(kind, send, recv, count, datatype, op, peer, comm->fallback, stream);
      comm->count_fallback(kind, plan->recv_bytes);
      return ncclSuccess;
    }
  }
  if (plan->phases.empty()) return ncclSuccess;
  iris::nccl::QueuedOp queued{comm, call, std::move(*plan), stream, false, false, false, {}};
  iris::nccl::decide_where(queued);
  // A device-resident scalar is read when the host reduces; the GPU kernel reads it itself.
  if (call.reduction.scalar_at != nullptr && !queued.on_stream) {
    const std::size_t bytes = iris::nccl::element_bytes(call.type);
    iris::nccl::read_device_scalar(call.reduction.scalar_at, bytes,
                                   &queued.call.reduction.scalar_bits);
    queued.call.reduction.scalar_at = nullptr;
  }
  const bool on_gpu = queued.on_stream;
  auto bytes =
      iris::nccl::plan_bytes(queued.plan, call.type, comm->nranks, comm->rank == call.peer);
  bytes.local += iris::nccl::host_staged_bytes(queued);
  if (on_gpu && bytes.local > 0 && strict())
    throw NcclError(ncclInvalidUsage,
                    std::string("IRISD_NCCL_STRICT=1: ") + iris::nccl::op_name(kind) +
                        " would write " + std::to_string(bytes.local) +
                        " bytes with a kernel on the GPU's SMs (" +
                        (iris::nccl::reduces(kind) ? "its reduction" : "a local copy") +
                        "), not on irisd's copy engines; unset IRISD_NCCL_STRICT to allow it");
  comm->count(kind, bytes, on_gpu);
  if (group.depth > 0) {
    queued.comm_kept = iris::nccl::CommRef(comm);
    group.ops.push_back(std::move(queued));
    return ncclSuccess;
  }
  std::vector<iris::nccl::QueuedOp> one;
  one.push_back(std::move(queued));
  iris::nccl::run_operations(one);
  return ncclSuccess;
}

}  // namespace

namespace iris::nccl {
void drop_group_operations(const ncclComm* comm) {
  std::erase_if(group.ops, [&](const QueuedOp& op) { return op.comm == comm; });
}
}  // namespace iris::nccl

namespace {

template <typename... Args>
ncclResult_t operation(const char* name, Args&&... args) {
  return guarded(name, [&] { return enqueue(std::forward<Args>(args)...); });
}

}  // namespace

extern "C" {

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return operation("ncclAllGather", comm, OpKind::kAllGather, sendbuff, recvbuff, sendcount,
                   datatype, ncclSum, 0, stream);
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
  return operation("ncclAllReduce", comm, OpKind::kAllReduce, sendbuff, recvbuff, count, datatype,
                   op, 0, stream);
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  return operation("ncclReduceScatter", comm, OpKind::kReduceScatter, sendbuff, recvbuff, recvcount,
                   datatype, op, 0, stream);
}

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  return operation("ncclReduce", comm, OpKind::kReduce, sendbuff, recvbuff, count, datatype, op,
                   root, stream);
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  return operation("ncclBroadcast", comm, OpKind::kBroadcast, sendbuff, recvbuff, count, datatype,
                   ncclSum, root, stream);
}

ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream) {
  return operation("ncclBcast", comm, OpKind::kBroadcast, buff, buff, count, datatype, ncclSum,
                   root, stream);
}

ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                          ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return operation("ncclAlltoAll", comm, OpKind::kAlltoAll, sendbuff, recvbuff, count, datatype,
                   ncclSum, 0, stream);
}

ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                        int root, ncclComm_t comm, cudaStream_t stream) {
  return operation("ncclGather", comm, OpKind::kGather, sendbuff, recvbuff, count, datatype,
                   ncclSum, root, stream);
}

ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count,
                         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  return operation("ncclScatter", comm, OpKind::kScatter, sendbuff, recvbuff, count, datatype,
                   ncclSum, root, stream);
}

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  return operation("ncclSend", comm, OpKind::kSend, sendbuff, nullptr, count, datatype, ncclSum,
                   peer, stream);
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  return operation("ncclRecv", comm, OpKind::kRecv, nullptr, recvbuff, count, datatype, ncclSum,
                   peer, stream);
}

ncclResult_t ncclGroupStart(void) {
  return guarded("ncclGroupStart", [&] {
    // The fallback's operations join the group too: its group spans ours.
    if (const iris::nccl::FallbackNccl* fb = iris::nccl::fallback_nccl())
      fb->check(fb->GroupStart(), "ncclGroupStart");
    ++group.depth;
    return ncclSuccess;
  });
}

ncclResult_t ncclGroupEnd(void) {
  return guarded("ncclGroupEnd", [&] {
    if (group.depth == 0)
      throw NcclError(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart on this thread");
    const iris::nccl::FallbackNccl* fb = iris::nccl::fallback_nccl();
    if (--group.depth == 0) {
      std::vector<iris::nccl::QueuedOp> ops;
      ops.swap(group.ops);
      // Every operation's communicator is inside from here (refused, with the whole group,
      // when one was aborted since its operation was queued).
      std::vector<iris::nccl::CommCall> inside;
      inside.reserve(ops.size());
      for (const iris::nccl::QueuedOp& op : ops) inside.emplace_back(op.comm, "ncclGroupEnd");
      iris::nccl::run_operations(ops);
    }
    if (fb != nullptr) fb->check(fb->GroupEnd(), "ncclGroupEnd");
    return ncclSuccess;
  });
}

ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  return guarded("ncclGroupSimulateEnd", [&]() -> ncclResult_t {
    throw NcclError(ncclInvalidUsage,
                    "irisd does not simulate groups: it has no model of its copy engines' time "
                    "(end the group with ncclGroupEnd)");
  });
}

ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                      ncclScalarResidence_t residence, ncclComm_t comm) {
  return guarded("ncclRedOpCreatePreMulSum", [&] {
    if (op == nullptr || scalar == nullptr || comm == nullptr)
      throw NcclError(ncclInvalidArgument, "op, scalar and comm must not be NULL");
    iris::nccl::CustomReduction made;
    made.type = checked_type(datatype);
    made.reduction.kind = iris::nccl::ReduceKind::kPreMulSum;
    if (residence == ncclScalarHostImmediate)
      std::memcpy(&made.reduction.scalar_bits, scalar, iris::nccl::element_bytes(made.type));
    else if (residence == ncclScalarDevice)
      made.reduction.scalar_at = scalar;
    else
      throw NcclError(ncclInvalidArgument,
                      "residence must be ncclScalarDevice or "
                      "ncclScalarHostImmediate");
    const int value = comm->next_custom_op++;
    comm->custom_ops.emplace(value, made);
    *op = static_cast<ncclRedOp_t>(value);
    return ncclSuccess;
  });
}

ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  return guarded("ncclRedOpDestroy", [&] {
    iris::nccl::check_comm(comm);
    if (comm->custom_ops.erase(static_cast<int>(op)) == 0)
      throw NcclError(ncclInvalidArgument,
                      "reduction " + std::to_string(static_cast<int>(op)) +
                          " was not made by ncclRedOpCreatePreMulSum for this communicator");
    return ncclSuccess;
  });
}

}  // extern "C"
