// An operation on host memory, run by the host: irisd's collectives waited for here, reductions
// and local copies done by this thread. Memory irisd cannot see (host memory not from
// ncclMemAlloc, or ncclMemAlloc memory another lane's session could not share) is staged through
// the communicator's scratch: copied in before the first phase, and the receive range copied out
// after the last.
#include <cstring>

#include "client/nccl/nccl_errors.hpp"
#include "client/nccl/operation_runner.hpp"

namespace iris::nccl {

namespace {

constexpr std::size_t kAlign = 64;
std::size_t aligned(std::size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// Whether irisd sees [ptr, ptr + bytes) through this communicator's session as it is.
bool visible(const ncclComm& comm, const void* ptr, std::size_t bytes) {
  return ProcessClients::instance().visible_to(*comm.lane, ptr, bytes);
}

class HostOp final : public RunningOp {
 public:
  HostOp(QueuedOp& op, char* scratch) : op_(op) {
    const OpPlan& plan = op.plan;
    char* at = scratch;
    bases_.scratch = at;
    at += aligned(plan.scratch_bytes);
    bases_.send = const_cast<char*>(static_cast<const char*>(op.call.send));
    bases_.recv = static_cast<char*>(op.call.recv);
    if (op.stage_send) {
      std::memcpy(at, op.call.send, plan.send_bytes);
      bases_.send = at;
      at += aligned(plan.send_bytes);
    }
    if (op.stage_recv) {
      std::memcpy(at, op.call.recv, plan.recv_bytes);  // in place, and bytes left alone
      bases_.recv = at;
      staged_recv_ = true;
    }
  }

  void local(const LocalStep& s) override {
    if (s.kind == LocalStep::Kind::kCopy) {
      std::memmove(bases_.at(s.to), bases_.at(s.from), s.bytes);
      return;
    }
    reduce_on_host(op_.call.type, op_.call.reduction, bases_.at(s.from), s.blocks, s.stride,
                   s.count, bases_.at(s.to));
  }

  void submit(const Transfer& t) override { waits_.submit(t, bases_); }

  void settle() override { waits_.settle(); }

  void finish() override {
    if (staged_recv_) std::memcpy(op_.call.recv, bases_.recv, op_.plan.recv_bytes);
  }

 private:
  QueuedOp& op_;
  AreaBases bases_;
  bool staged_recv_ = false;
  HostWaits waits_{*op_.comm};
};

}  // namespace

std::size_t host_scratch_bytes(const QueuedOp& op) {
  const OpPlan& plan = op.plan;
  std::size_t bytes = aligned(plan.scratch_bytes);
  if (op.stage_send) bytes += aligned(plan.send_bytes);
  if (op.stage_recv) bytes += aligned(plan.recv_bytes);
  return bytes;
}

void decide_where(QueuedOp& op) {
  op.on_stream = runs_on_stream(op);
  if (op.on_stream) return;
  const OpPlan& plan = op.plan;
  op.stage_send = plan.send_bytes > 0 && !visible(*op.comm, op.call.send, plan.send_bytes);
  op.stage_recv = plan.recv_bytes > 0 && !visible(*op.comm, op.call.recv, plan.recv_bytes);
}

uint64_t host_staged_bytes(const QueuedOp& op) {
  return (op.stage_send ? op.plan.send_bytes : 0) + (op.stage_recv ? 2 * op.plan.recv_bytes : 0);
}

std::unique_ptr<RunningOp> start_on_host(QueuedOp& op, char* scratch) {
  return std::make_unique<HostOp>(op, scratch);
}

}  // namespace iris::nccl
