// Collectives as plans: the copies (source rank and offset, destination rank and offset, bytes)
// that move one collective's data. Pure functions of the ranks' arguments, no daemon state: the
// pair rule of every fixed-size collective is its row in the shape table
// (iris/shared/collective_shape.hpp); all-to-all-v's per-peer counts are the one rule written
// here. The scheduler executes whatever they return.
//
// A plan is built pair by pair: the copies from rank s to rank d depend only on the arguments of
// s and d, so the scheduler issues them as soon as both ranks have arrived, with no barrier.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "iris/error_code.hpp"
#include "iris/shared/collective_shape.hpp"

namespace iris::daemon {

using CollectiveKind = shm::Opcode;

// One rank's arguments, already checked against its own buffers (see request_validation.hpp).
// Offsets are bytes into the rank's registered send and receive buffers.
struct RankArgs {
  CollectiveKind kind = CollectiveKind::kAllGather;
  uint64_t bytes = 0;  // per block; unused by all-to-all-v
  uint32_t root = 0;   // broadcast, gather, scatter
  uint64_t send_offset = 0;
  uint64_t recv_offset = 0;
  // The copy from this rank to itself needs no engine: the data is already there (in place) or
  // the client's stream copied it (kOwnBlockCopiedByClient).
  bool self_copy_done = false;
  // all-to-all-v, by peer: bytes and displacement from send_offset / recv_offset.
  std::vector<uint64_t> send_counts, send_displs, recv_counts, recv_displs;
};

struct PlannedCopy {
  uint32_t src_rank;
  uint64_t src_offset;  // into src_rank's send buffer
  uint32_t dst_rank;
  uint64_t dst_offset;  // into dst_rank's receive buffer
  uint64_t bytes;
};

struct PlanError {
  ErrorCode code;
  std::string message;
};

// Arguments every rank must share (collective, bytes, root): nullopt when `b` agrees with `a`,
// else kSizeMismatch (bytes) or kInvalidArgument (collective, root), naming both ranks.
std::optional<PlanError> check_agreement(const RankArgs& a, uint32_t rank_a, const RankArgs& b,
                                         uint32_t rank_b);

// What rank `src` sends to rank `dst`, from src's arguments alone: a range of src's send buffer
// (offset from its start), nullopt when nothing. A node sends other nodes these ranges (scale
// out) before it knows their ranks' arguments.
struct SourceBlock {
  uint64_t offset;
  uint64_t bytes;
};
std::optional<SourceBlock> source_block(const RankArgs& src_args, uint32_t src, uint32_t dst);

// all-to-all-v's pair rule (its per-peer counts), and the error for what is not a collective:
// plan_pair's cases that build words, out of line.
std::variant<std::optional<PlannedCopy>, PlanError> plan_pair_by_counts(const RankArgs& s,
                                                                        uint32_t src,
                                                                        const RankArgs& d,
                                                                        uint32_t dst);

// The copy from rank `src` into rank `dst` (which may be the same rank), nullopt when the pair
// moves nothing, or kSizeMismatch when all-to-all-v counts disagree (what src sends to dst is
// not what dst expects from src). Both ranks' arguments must agree (check_agreement). Inline:
// the scheduler calls it for every pair of ranks as they arrive (twice per copy of a small
// collective), where a call into another translation unit cost as much as the rule.
inline std::variant<std::optional<PlannedCopy>, PlanError> plan_pair(const RankArgs& s,
                                                                     uint32_t src,
                                                                     const RankArgs& d,
                                                                     uint32_t dst) {
  const shm::CollectiveShape* shape = shm::shape_of(s.kind);
  if (shape == nullptr || s.kind == CollectiveKind::kAllToAllV)
    return plan_pair_by_counts(s, src, d, dst);
  if (src == dst && s.self_copy_done) return std::optional<PlannedCopy>{};
  const auto block = shm::pair_block(*shape, src, dst, s.root, s.bytes);
  if (!block) return std::optional<PlannedCopy>{};
  return PlannedCopy{src, s.send_offset + block->send_offset, dst,
                     d.recv_offset + block->recv_offset, block->bytes};
}

// The whole plan of a collective whose ranks have all arrived: every pair's copy, or the first
// disagreement. The scheduler builds the same copies pair by pair as ranks arrive; this is the
// tests' oracle for it (property tests compare its copies with the collectives' definitions).
std::variant<std::vector<PlannedCopy>, PlanError> build_plan(std::span<const RankArgs> ranks);

}  // namespace iris::daemon
