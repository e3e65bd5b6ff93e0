// The rounds of a group's operations (operation_runner.hpp).
#include "client/nccl/operation_runner.hpp"

#include <algorithm>
#include <exception>
#include <map>

#include "client/nccl/nccl_errors.hpp"
#include "iris/group.hpp"

namespace iris::nccl {

char* AreaBases::at(const At& at) const {
  char* base = at.area == Area::kSend ? send : at.area == Area::kRecv ? recv : scratch;
  return base + at.offset;
}

Request submit_transfer(Communicator& comm, const Transfer& t, const AreaBases& bases,
                        Stream stream) {
  const char* send = t.send ? bases.at(*t.send) : nullptr;
  char* recv = t.recv ? bases.at(*t.recv) : nullptr;
  switch (t.move) {
    case Move::kAllGather:
      return comm.all_gather(send, recv, t.bytes, stream);
    case Move::kAllToAll:
      return comm.all_to_all(send, recv, t.bytes, stream);
    case Move::kAllToAllV:
      return comm.all_to_all_v(send, t.v[0], t.v[1], recv, t.v[2], t.v[3], stream);
    case Move::kBroadcast:
      return comm.broadcast(recv, t.bytes, t.peer, stream);
    case Move::kGather:
      return comm.gather(send, recv, t.bytes, t.peer, stream);
    case Move::kScatter:
      return comm.scatter(send, recv, t.bytes, t.peer, stream);
    case Move::kSend:
      return comm.send(send, t.bytes, t.peer, stream);
    case Move::kRecv:
      return comm.recv(recv, t.bytes, t.peer, stream);
  }
  throw NcclError(ncclInternalError, "unknown transfer");
}

HostWaits::~HostWaits() {
  for (Request& r : requests_) try {
      comm_.wait_for(r);
    } catch (const Error&) {
    } catch (const NcclError&) {
      return;  // aborted: nobody waits any more
    }
}

void HostWaits::submit(const Transfer& transfer, const AreaBases& bases) {
  requests_.push_back(submit_transfer(comm_.comm, transfer, bases, Stream{}));
}

void HostWaits::settle() {
  std::vector<Request> requests;
  requests.swap(requests_);
  // Each ends here (failed or not), unless the communicator is aborted: wait_for throws
  // NcclError at once. Then wait_all, every request done, throws the first failure.
  for (Request& r : requests) try {
      comm_.wait_for(r);
    } catch (const Error&) {
    }
  wait_all(requests);
}

namespace {

struct Running {
  QueuedOp* op;
  std::unique_ptr<RunningOp> run;
  std::exception_ptr failure;
};

// Runs `step` for `r` unless it failed already; a failure stops its later steps.
template <typename Step>
void step(Running& r, Step&& body) {
  if (r.failure) return;
  try {
    body();
  } catch (...) {
    r.failure = std::current_exception();
  }
}

// Host operations of one communicator share its scratch: each gets its own part.
void place_host_scratch(std::vector<QueuedOp>& ops, std::vector<Running>& running) {
  std::map<ncclComm*, std::size_t> total;
  std::vector<std::size_t> offset(ops.size());
  for (std::size_t i = 0; i < ops.size(); ++i)
    if (!ops[i].on_stream) {
      offset[i] = total[ops[i].comm];
      total[ops[i].comm] += host_scratch_bytes(ops[i]);
    }
  std::map<ncclComm*, char*> base;
  for (auto& [comm, bytes] : total)
    base[comm] = comm->host_scratch.reserve(comm->lane->client, bytes);
  for (std::size_t i = 0; i < ops.size(); ++i) {
    running[i].op = &ops[i];
    step(running[i], [&] {
      running[i].run = ops[i].on_stream ? start_on_stream(ops[i])
                                        : start_on_host(ops[i], base[ops[i].comm] + offset[i]);
    });
  }
}

}  // namespace

void run_operations(std::vector<QueuedOp>& ops) {
  std::vector<Running> running(ops.size());
  place_host_scratch(ops, running);
  std::size_t rounds = 0;
  for (const QueuedOp& op : ops) rounds = std::max(rounds, op.plan.phases.size());
  for (std::size_t k = 0; k < rounds; ++k) {
    auto has = [&](Running& r) { return !r.failure && k < r.op->plan.phases.size(); };
    for (Running& r : running)
      if (has(r))
        step(r, [&] {
          for (const LocalStep& s : r.op->plan.phases[k].before) r.run->local(s);
        });
    group_start();
    for (Running& r : running)
      if (has(r))
        step(r, [&] {
          for (const Transfer& t : r.op->plan.phases[k].transfers) r.run->submit(t);
        });
    try {
      group_end();
    } catch (...) {
      for (Running& r : running)
        if (has(r) && r.op->on_stream) r.failure = std::current_exception();
    }
    for (Running& r : running)
      if (has(r)) step(r, [&] { r.run->settle(); });
    for (Running& r : running)
      if (has(r))
        step(r, [&] {
          for (const LocalStep& s : r.op->plan.phases[k].after) r.run->local(s);
        });
  }
  for (Running& r : running)
    if (r.run && !r.failure) step(r, [&] { r.run->finish(); });
  for (Running& r : running)
    if (r.failure) {
      // A failure past the checks of the call (a rank lost, irisd gone) breaks the
      // communicator, as NCCL's asynchronous errors do.
      try {
        std::rethrow_exception(r.failure);
      } catch (const Error& e) {
        r.op->comm->fail(result_of(e.code()),
                         std::string(op_name(r.op->call.kind)) + ": " + e.what());
      } catch (...) {
      }
    }
  for (Running& r : running)
    if (r.failure) std::rethrow_exception(r.failure);
}

}  // namespace iris::nccl
