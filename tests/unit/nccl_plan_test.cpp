// The NCCL library's operation plans, checked as properties over every operation, rank count,
// count, element size, rank and root: every step stays inside the ranges the plan declares, every
// rank's plan agrees with the others' (same transfers, all-to-all-v counts that match pairwise),
// and the plans, run on a simulation of irisd's collectives, give NCCL's results.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "client/nccl/operation_plan.hpp"

namespace iris::nccl {
namespace {

constexpr OpKind kKinds[] = {OpKind::kAllGather, OpKind::kAllReduce, OpKind::kReduceScatter,
                             OpKind::kReduce,    OpKind::kBroadcast, OpKind::kAlltoAll,
                             OpKind::kGather,    OpKind::kScatter,   OpKind::kSend,
                             OpKind::kRecv};

// A call with distinct send and receive addresses (never dereferenced).
OpCall make_call(OpKind kind, uint64_t count, ElementType type) {
  OpCall call;
  call.kind = kind;
  call.send = reinterpret_cast<void*>(0x1000);
  call.recv = reinterpret_cast<void*>(0x900000);
  call.count = count;
  call.type = type;
  return call;
}

uint64_t area_bytes(const OpPlan& p, Area a) {
  return a == Area::kSend ? p.send_bytes : a == Area::kRecv ? p.recv_bytes : p.scratch_bytes;
}

// [at, at + bytes) lies inside its area.
void expect_inside(const OpPlan& p, const At& at, uint64_t bytes, const std::string& what) {
  EXPECT_LE(at.offset + bytes, area_bytes(p, at.area)) << what;
}

TEST(NcclPlan, EveryStepStaysInsideTheRangesItsPlanDeclares) {
  int plans = 0;
  for (OpKind kind : kKinds)
    for (uint32_t n = 1; n <= 9; ++n)
      for (uint64_t count : {0ull, 1ull, 2ull, 5ull, 8ull, 1031ull})
        for (ElementType type : {ElementType::kInt8, ElementType::kFloat16, ElementType::kFloat64})
          for (uint32_t rank = 0; rank < n; ++rank) {
            OpCall call = make_call(kind, count, type);
            call.peer = (rank + 1) % n;
            const auto plan = plan_operation(call, n, rank);
            ASSERT_TRUE(plan);
            ++plans;
            if (count == 0) {
              EXPECT_TRUE(plan->phases.empty());
              continue;
            }
            const std::string what = std::string(op_name(kind)) + " n " + std::to_string(n) +
                                     " count " + std::to_string(count) + " rank " +
                                     std::to_string(rank);
            const uint64_t size = element_bytes(type);
            for (const Phase& ph : plan->phases) {
              for (const Transfer& t : ph.transfers) {
                const auto [send, recv] = transfer_reach(t, n, rank == call.peer);
                if (t.send) expect_inside(*plan, *t.send, send, what + " transfer send");
                if (t.recv) expect_inside(*plan, *t.recv, recv, what + " transfer recv");
              }
              for (const auto* steps : {&ph.before, &ph.after})
                for (const LocalStep& s : *steps) {
                  const uint64_t from = s.kind == LocalStep::Kind::kCopy
                                            ? s.bytes
                                            : (s.blocks - 1) * s.stride + s.count * size;
                  const uint64_t to = s.kind == LocalStep::Kind::kCopy ? s.bytes : s.count * size;
                  expect_inside(*plan, s.from, from, what + " local from");
                  expect_inside(*plan, s.to, to, what + " local to");
                }
            }
          }
  EXPECT_EQ(plans, 10 * 45 * 6 * 3);  // kinds, (n, rank) pairs, counts, types
}

TEST(NcclPlan, BytesAreAccountedToIrisdAndToTheLocalSteps) {
  // All-reduce of 10 int32 on 4 ranks, rank 1: chunks 3, 3, 2, 2; irisd lands 4 blocks of its
  // chunk (4 x 12 bytes) and the 3 other chunks (28 bytes); the reduction writes 12 bytes.
  const auto all_reduce =
      plan_operation(make_call(OpKind::kAllReduce, 10, ElementType::kInt32), 4, 1);
  const PlanBytes ar = plan_bytes(*all_reduce, ElementType::kInt32, 4, false);
  EXPECT_EQ(ar.by_irisd, 4u * 12 + 28);
  EXPECT_EQ(ar.local, 12u);
  // An all-gather moves everything through irisd and nothing locally.
  const auto gather = plan_operation(make_call(OpKind::kAllGather, 10, ElementType::kInt8), 3, 0);
  const PlanBytes ag = plan_bytes(*gather, ElementType::kInt8, 3, false);
  EXPECT_EQ(ag.by_irisd, 30u);
  EXPECT_EQ(ag.local, 0u);
}

TEST(NcclPlan, SizesThatOverflowAreRefused) {
  OpCall call = make_call(OpKind::kAllGather, UINT64_MAX / 4, ElementType::kFloat64);
  EXPECT_FALSE(plan_operation(call, 2, 0));
  call.count = UINT64_MAX / 16;  // count * 8 fits, times 3 ranks does not
  EXPECT_FALSE(plan_operation(call, 3, 0));
}

TEST(NcclPlan, AllReduceChunksCoverTheCountInOrder) {
  for (uint32_t n = 1; n <= 17; ++n)
    for (uint64_t count : {0ull, 1ull, 3ull, 16ull, 17ull, 1000003ull}) {
      uint64_t next = 0;
      for (uint32_t r = 0; r < n; ++r) {
        const auto [first, elements] = all_reduce_chunk(count, n, r);
        EXPECT_EQ(first, next);
        EXPECT_LE(elements, count / n + 1);
        next = first + elements;
      }
      EXPECT_EQ(next, count);
    }
}

// irisd's collectives over every rank's areas, as the daemon runs them (tests of the daemon
// check that it does).
struct RankMemory {
  std::vector<char> send, recv, scratch;
  char* at(const At& at) {
    auto& v = at.area == Area::kSend ? send : at.area == Area::kRecv ? recv : scratch;
    return v.data() + at.offset;
  }
};

// memcpy that copies nothing without touching its pointers (an empty area has none).
void copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

void run_transfer(std::vector<RankMemory>& mem, const std::vector<const Transfer*>& t,
                  uint32_t root) {
  const uint32_t n = static_cast<uint32_t>(mem.size());
  const uint64_t b = t[0]->bytes;
  for (uint32_t src = 0; src < n; ++src)
    for (uint32_t dst = 0; dst < n; ++dst) {
      const Transfer& s = *t[src];
      const Transfer& d = *t[dst];
      switch (s.move) {
        case Move::kAllGather:
          copy(mem[dst].at(*d.recv) + src * b, mem[src].at(*s.send), b);
          break;
        case Move::kAllToAll:
          copy(mem[dst].at(*d.recv) + src * b, mem[src].at(*s.send) + dst * b, b);
          break;
        case Move::kAllToAllV:
          ASSERT_EQ(s.v[0][dst], d.v[2][src]) << "what " << src << " sends " << dst;
          copy(mem[dst].at(*d.recv) + d.v[3][src], mem[src].at(*s.send) + s.v[1][dst], s.v[0][dst]);
          break;
        case Move::kGather:
          if (dst == root) copy(mem[dst].at(*d.recv) + src * b, mem[src].at(*s.send), b);
          break;
        case Move::kBroadcast:
          if (src == root && dst != root) copy(mem[dst].at(*d.recv), mem[src].at(*s.recv), b);
          break;
        case Move::kScatter:
          if (src == root) copy(mem[dst].at(*d.recv), mem[src].at(*s.send) + dst * b, b);
          break;
        default:
          break;
      }
    }
}

// Runs every rank's plan of `kind` on int32 inputs (rank r, element i: r * 1000 + i) and
// returns each rank's receive area.
std::vector<std::vector<int32_t>> simulate(OpKind kind, uint32_t n, uint64_t count, uint32_t root,
                                           ReduceKind reduce) {
  std::vector<RankMemory> mem(n);
  std::vector<OpPlan> plans;
  for (uint32_t r = 0; r < n; ++r) {
    OpCall call = make_call(kind, count, ElementType::kInt32);
    call.reduction.kind = reduce;
    call.peer = root;
    plans.push_back(*plan_operation(call, n, r));
    mem[r].send.resize(plans[r].send_bytes);
    mem[r].recv.assign(plans[r].recv_bytes, 0);
    mem[r].scratch.resize(plans[r].scratch_bytes + 8);
    for (uint64_t i = 0; i < plans[r].send_bytes / 4; ++i) {
      const int32_t v = static_cast<int32_t>(r * 1000 + i);
      copy(mem[r].send.data() + i * 4, &v, 4);
    }
  }
  for (std::size_t p = 0; p < plans[0].phases.size(); ++p) {
    for (uint32_t r = 0; r < n; ++r)
      for (const LocalStep& s : plans[r].phases[p].before)
        if (s.bytes > 0) std::memmove(mem[r].at(s.to), mem[r].at(s.from), s.bytes);
    for (std::size_t k = 0; k < plans[0].phases[p].transfers.size(); ++k) {
      std::vector<const Transfer*> t;
      for (uint32_t r = 0; r < n; ++r) t.push_back(&plans[r].phases[p].transfers[k]);
      run_transfer(mem, t, root);
    }
    for (uint32_t r = 0; r < n; ++r)
      for (const LocalStep& s : plans[r].phases[p].after)
        reduce_on_host(ElementType::kInt32, {reduce}, mem[r].at(s.from), s.blocks, s.stride,
                       s.count, mem[r].at(s.to));
  }
  std::vector<std::vector<int32_t>> out(n);
  for (uint32_t r = 0; r < n; ++r) {
    out[r].resize(mem[r].recv.size() / 4);
    copy(out[r].data(), mem[r].recv.data(), mem[r].recv.size());
  }
  return out;
}

TEST(NcclPlan, ReductionPlansGiveNcclsResultsOnASimulationOfIrisd) {
  for (uint32_t n = 1; n <= 7; ++n)
    for (uint64_t count : {1ull, 2ull, 5ull, 7ull, 64ull, 301ull}) {
      const int32_t rank_sum = static_cast<int32_t>(1000 * n * (n - 1) / 2);
      auto sum_at = [&](uint64_t i) { return rank_sum + static_cast<int32_t>(n * i); };
      const auto all_reduce = simulate(OpKind::kAllReduce, n, count, 0, ReduceKind::kSum);
      for (uint32_t r = 0; r < n; ++r)
        for (uint64_t i = 0; i < count; ++i)
          ASSERT_EQ(all_reduce[r][i], sum_at(i)) << "all-reduce n " << n << " count " << count;
      const auto scattered = simulate(OpKind::kReduceScatter, n, count, 0, ReduceKind::kMax);
      for (uint32_t r = 0; r < n; ++r)
        for (uint64_t i = 0; i < count; ++i)
          ASSERT_EQ(scattered[r][i], static_cast<int32_t>((n - 1) * 1000 + r * count + i));
      const uint32_t root = n - 1;
      const auto reduced = simulate(OpKind::kReduce, n, count, root, ReduceKind::kSum);
      for (uint64_t i = 0; i < count; ++i) ASSERT_EQ(reduced[root][i], sum_at(i));
      const auto gathered = simulate(OpKind::kAllGather, n, count, 0, ReduceKind::kSum);
      for (uint32_t r = 0; r < n; ++r)
        for (uint32_t q = 0; q < n; ++q)
          ASSERT_EQ(gathered[r][q * count], static_cast<int32_t>(q * 1000));
    }
}

}  // namespace
}  // namespace iris::nccl
