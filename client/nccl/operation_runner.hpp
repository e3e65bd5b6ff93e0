// Runs NCCL operations: one outside a group, or a group's at ncclGroupEnd. Every operation's plan
// (operation_plan.hpp) runs in rounds: each round submits phase k of every operation that has
// one, inside one irisd group, and then runs the local steps that follow it. So a group's sends
// and receives never wait for one another, and a group's all-reduces each take their second
// phase only once every one of them has its first: the same order on every rank.
//
// Where an operation runs: with no stream on host memory (irisd's host engine, or memory from
// ncclMemAlloc there) the host submits and waits, and reduces on the host; with a stream (or
// device memory on the legacy stream) everything is enqueued on the GPU stream and the host
// returns (stream_operation.cpp).
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "client/nccl/nccl_comm.hpp"
#include "client/nccl/operation_plan.hpp"

namespace iris::nccl {

// An operation as the API checked and planned it, with where it runs, decided once when it was
// called: on its GPU stream or on the host, and for the host which of its buffers go through
// scratch memory because irisd cannot see them.
struct QueuedOp {
  ncclComm* comm;
  OpCall call;
  OpPlan plan;
  cudaStream_t stream;
  bool on_stream = false;
  bool stage_send = false;
  bool stage_recv = false;
  CommRef comm_kept;  // keeps the struct while a group holds the operation
};

// One operation as it runs; the runner calls these in round order.
class RunningOp {
 public:
  virtual ~RunningOp() = default;
  virtual void local(const LocalStep& step) = 0;
  virtual void submit(const Transfer& transfer) = 0;
  // After every operation's transfers of the round were submitted: the host waits here.
  virtual void settle() = 0;
  // After the last phase.
  virtual void finish() = 0;
};

// The base address of each Area for one running operation.
struct AreaBases {
  char* send = nullptr;
  char* recv = nullptr;
  char* scratch = nullptr;
  char* at(const At& at) const;
};
// Submits one transfer to irisd through `comm`, on `stream` (none: the host waits for it).
Request submit_transfer(Communicator& comm, const Transfer& transfer, const AreaBases& bases,
                        Stream stream);

// A round's transfers of `comm` that the host waits for (RunningOp::settle); an operation that
// fails midway still waits for what it submitted before its buffers go, unless ncclCommAbort
// ends the communicator meanwhile: then it leaves at once.
class HostWaits {
 public:
  explicit HostWaits(ncclComm& comm) : comm_(comm) {}
  HostWaits(const HostWaits&) = delete;
  HostWaits& operator=(const HostWaits&) = delete;
  ~HostWaits();
  void submit(const Transfer& transfer, const AreaBases& bases);
  // Waits for the round's transfers; throws the first failure.
  void settle();

 private:
  ncclComm& comm_;
  std::vector<Request> requests_;
};

// Drops the operations on `comm` that this thread's open group holds (ncclCommAbort from the
// thread that queued them: they would never run).
void drop_group_operations(const ncclComm* comm);

// Where `op` runs and what it needs there; throws NcclError for memory it cannot move.
std::unique_ptr<RunningOp> start_on_host(QueuedOp& op, char* scratch);
std::unique_ptr<RunningOp> start_on_stream(QueuedOp& op);
// The host scratch bytes an operation on the host needs (what it gathers, staged copies).
std::size_t host_scratch_bytes(const QueuedOp& op);
// Where `op` runs: sets on_stream, and for the host which buffers are staged.
void decide_where(QueuedOp& op);
// The bytes the host writes staging `op` (the send copied in; the receive range copied in and
// back out), counted as the host's in the operation's tally.
uint64_t host_staged_bytes(const QueuedOp& op);
// True when `op` runs on its GPU stream, false when on the host.
bool runs_on_stream(const QueuedOp& op);

// Runs the operations in rounds; throws the first failure (every operation that could go on has
// run to its end by then).
void run_operations(std::vector<QueuedOp>& ops);

}  // namespace iris::nccl
