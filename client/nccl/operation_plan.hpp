// What each NCCL operation is made of on irisd, decided once here for every place that runs one
// (the host and the GPU stream): the irisd collectives it submits, in phases, and the local steps
// around them (a copy, a reduction over blocks that irisd gathered into scratch memory). Pure:
// no memory is touched, so property tests check every operation's plan on its own.
//
// The reductions are irisd's all-to-all followed by a local reduction: reduce-scatter is an
// all-to-all into scratch, then each rank reduces its n blocks; reduce gathers into the root's
// scratch; all-reduce is a reduce-scatter of n nearly equal chunks (an all-to-all-v) followed by
// an all-to-all-v that hands each rank's reduced chunk to the others.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "client/nccl/element_types.hpp"
#include "iris/shared/api_operations.hpp"

namespace iris::nccl {

enum class OpKind : uint8_t {
  kAllGather,
  kAllReduce,
  kReduceScatter,
  kReduce,
  kBroadcast,
  kAlltoAll,
  kGather,
  kScatter,
  kSend,
  kRecv,
};
inline constexpr int kOpKindCount = 10;
static_assert(kOpKindCount == kApiOperationCount, "irisd counts NCCL's operations by these kinds");
const char* op_name(OpKind kind);
bool reduces(OpKind kind);

// One rank's call, as the API received it; `peer` is the root (rooted kinds) or the peer
// (send, recv). Pointers only decide in-place cases: the plan never dereferences them.
struct OpCall {
  OpKind kind;
  const void* send = nullptr;
  void* recv = nullptr;
  std::size_t count = 0;  // NCCL's count argument: per rank where NCCL says so
  ElementType type = ElementType::kInt8;
  Reduction reduction;
  uint32_t peer = 0;
};

// Where a step reads or writes: an offset into the send buffer, the receive buffer or the
// operation's scratch memory.
enum class Area : uint8_t { kSend, kRecv, kScratch };
struct At {
  Area area;
  uint64_t offset = 0;
};

// One irisd collective or point-to-point call (iris::Communicator's methods).
enum class Move : uint8_t {
  kAllGather,
  kAllToAll,
  kAllToAllV,
  kBroadcast,
  kGather,
  kScatter,
  kSend,
  kRecv
};
struct Transfer {
  Move move;
  std::optional<At> send;
  std::optional<At> recv;
  uint64_t bytes = 0;  // per block (all-to-all-v: in `v`)
  uint32_t peer = 0;   // root or peer
  // all-to-all-v in bytes: send counts, send displacements, receive counts, receive
  // displacements, each relative to its At.
  std::array<std::vector<uint64_t>, 4> v;
};

struct LocalStep {
  enum class Kind : uint8_t { kCopy, kReduce } kind;
  At from;
  At to;
  uint64_t bytes = 0;   // kCopy
  uint32_t blocks = 0;  // kReduce: `blocks` blocks of `count` elements, `stride` bytes apart
  uint64_t stride = 0;
  uint64_t count = 0;
};

struct Phase {
  std::vector<LocalStep> before;
  std::vector<Transfer> transfers;
  std::vector<LocalStep> after;
};

struct OpPlan {
  // How far the operation reads its send buffer and writes its receive buffer (0: not at all on
  // this rank), and the scratch memory it needs.
  uint64_t send_bytes = 0;
  uint64_t recv_bytes = 0;
  uint64_t scratch_bytes = 0;
  std::vector<Phase> phases;
};

// The plan of `call` on `rank` of `nranks`, or nullopt when its sizes overflow 64 bits. Assumes
// the call was validated (root and peer below nranks). An operation of count 0 has no phases.
std::optional<OpPlan> plan_operation(const OpCall& call, uint32_t nranks, uint32_t rank);

// How far a transfer reads its send area and writes its receive area (`root`: this rank is the
// transfer's root).
std::pair<uint64_t, uint64_t> transfer_reach(const Transfer& t, uint32_t nranks, bool root);

// What an operation's plan moves into this rank's memory: the bytes irisd writes there, and the
// bytes the local steps write (a reduction's output, a local copy).
struct PlanBytes {
  uint64_t by_irisd = 0;
  uint64_t local = 0;
};
PlanBytes plan_bytes(const OpPlan& plan, ElementType type, uint32_t nranks, bool root);

// All-reduce's chunk of `rank`: chunks differ by at most one element, the first count % nranks
// one larger. Returns {first element, elements}.
std::pair<uint64_t, uint64_t> all_reduce_chunk(uint64_t count, uint32_t nranks, uint32_t rank);

}  // namespace iris::nccl
