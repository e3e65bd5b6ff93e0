#include "daemon/collectives/plan.hpp"

#include "iris/shared/collective_shape.hpp"

namespace iris::daemon {

std::optional<PlanError> check_agreement(const RankArgs& a, uint32_t rank_a, const RankArgs& b,
                                         uint32_t rank_b) {
  const auto who = [&](uint32_t r) { return "rank " + std::to_string(r); };
  if (a.kind != b.kind)
    return PlanError{ErrorCode::kInvalidArgument,
                     who(rank_b) + " called " + std::string(shm::opcode_name(b.kind)) + " where " +
                         who(rank_a) + " called " + std::string(shm::opcode_name(a.kind)) +
                         " (every rank must call the same collectives in the same order)"};
  const shm::CollectiveShape* shape = shm::shape_of(a.kind);
  if (shape != nullptr && shape->rooted && a.root != b.root)
    return PlanError{ErrorCode::kInvalidArgument, who(rank_b) + " passed root " +
                                                      std::to_string(b.root) + ", " + who(rank_a) +
                                                      " root " + std::to_string(a.root)};
  const bool fixed_size = shape != nullptr && shape->send.extent != shm::Extent::kPerPeerCounts &&
                          shape->send.extent != shm::Extent::kNone;
  if (fixed_size && a.bytes != b.bytes && shape->point_to_point) {
    const uint64_t sent = rank_a == shm::kSenderInPair ? a.bytes : b.bytes;
    const uint64_t received = rank_a == shm::kSenderInPair ? b.bytes : a.bytes;
    return PlanError{ErrorCode::kSizeMismatch,
                     "a send of " + std::to_string(sent) + " bytes met a receive of " +
                         std::to_string(received) +
                         " bytes (a send and the receive it matches must have the same size)"};
  }
  if (fixed_size && a.bytes != b.bytes)
    return PlanError{ErrorCode::kSizeMismatch, who(rank_b) + " passed " + std::to_string(b.bytes) +
                                                   " bytes, " + who(rank_a) + " " +
                                                   std::to_string(a.bytes)};
  return std::nullopt;
}

std::optional<SourceBlock> source_block(const RankArgs& s, uint32_t src, uint32_t dst) {
  if (s.kind == CollectiveKind::kAllToAllV) {
    if (s.send_counts[dst] == 0) return std::nullopt;
    return SourceBlock{s.send_offset + s.send_displs[dst], s.send_counts[dst]};
  }
  const shm::CollectiveShape* shape = shm::shape_of(s.kind);
  if (shape == nullptr) return std::nullopt;
  const auto block = shm::pair_block(*shape, src, dst, s.root, s.bytes);
  if (!block) return std::nullopt;
  return SourceBlock{s.send_offset + block->send_offset, block->bytes};
}

std::variant<std::optional<PlannedCopy>, PlanError> plan_pair_by_counts(const RankArgs& s,
                                                                        uint32_t src,
                                                                        const RankArgs& d,
                                                                        uint32_t dst) {
  if (shm::shape_of(s.kind) == nullptr)
    return PlanError{ErrorCode::kInvalidArgument, "not a collective"};
  if (src == dst && s.self_copy_done) return std::optional<PlannedCopy>{};
  if (s.send_counts[dst] != d.recv_counts[src])
    return PlanError{ErrorCode::kSizeMismatch, "rank " + std::to_string(src) + " sends " +
                                                   std::to_string(s.send_counts[dst]) +
                                                   " bytes to rank " + std::to_string(dst) +
                                                   ", which expects " +
                                                   std::to_string(d.recv_counts[src])};
  if (s.send_counts[dst] == 0) return std::optional<PlannedCopy>{};
  return PlannedCopy{src, s.send_offset + s.send_displs[dst], dst,
                     d.recv_offset + d.recv_displs[src], s.send_counts[dst]};
}

std::variant<std::vector<PlannedCopy>, PlanError> build_plan(std::span<const RankArgs> ranks) {
  std::vector<PlannedCopy> plan;
  const auto n = static_cast<uint32_t>(ranks.size());
  for (uint32_t r = 1; r < n; ++r)
    if (auto bad = check_agreement(ranks[0], 0, ranks[r], r)) return *bad;
  for (uint32_t src = 0; src < n; ++src) {
    for (uint32_t dst = 0; dst < n; ++dst) {
      auto pair = plan_pair(ranks[src], src, ranks[dst], dst);
      if (auto* bad = std::get_if<PlanError>(&pair)) return *bad;
      if (auto& c = std::get<std::optional<PlannedCopy>>(pair)) plan.push_back(*c);
    }
  }
  return plan;
}

}  // namespace iris::daemon
