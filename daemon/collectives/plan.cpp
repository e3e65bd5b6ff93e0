#include "daemon/collectives/plan.hpp"

namespace iris::daemon {

std::string_view collective_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kNop:
      return "nop";
    case CollectiveKind::kAllGather:
      return "all_gather";
    case CollectiveKind::kAllToAll:
      return "all_to_all";
    case CollectiveKind::kAllToAllV:
      return "all_to_all_v";
    case CollectiveKind::kBroadcast:
      return "broadcast";
    case CollectiveKind::kGather:
      return "gather";
    case CollectiveKind::kScatter:
      return "scatter";
    case CollectiveKind::kBarrier:
      return "barrier";
  }
  return "unknown";
}

namespace {

bool rooted(CollectiveKind kind) {
  return kind == CollectiveKind::kBroadcast || kind == CollectiveKind::kGather ||
         kind == CollectiveKind::kScatter;
}

std::optional<PlannedCopy> copy(uint32_t src, uint64_t src_offset, uint32_t dst,
                                uint64_t dst_offset, uint64_t bytes) {
  if (bytes == 0) return std::nullopt;
  return PlannedCopy{src, src_offset, dst, dst_offset, bytes};
}

}  // namespace

std::optional<PlanError> check_agreement(const RankArgs& a, uint32_t rank_a, const RankArgs& b,
                                         uint32_t rank_b) {
  const auto who = [&](uint32_t r) { return "rank " + std::to_string(r); };
  if (a.kind != b.kind)
    return PlanError{ErrorCode::kInvalidArgument,
                     who(rank_b) + " called " + std::string(collective_name(b.kind)) + " where " +
                         who(rank_a) + " called " + std::string(collective_name(a.kind)) +
                         " (every rank must call the same collectives in the same order)"};
  if (rooted(a.kind) && a.root != b.root)
    return PlanError{ErrorCode::kInvalidArgument, who(rank_b) + " passed root " +
                                                      std::to_string(b.root) + ", " + who(rank_a) +
                                                      " root " + std::to_string(a.root)};
  if (a.kind != CollectiveKind::kAllToAllV && a.kind != CollectiveKind::kBarrier &&
      a.bytes != b.bytes)
    return PlanError{ErrorCode::kSizeMismatch, who(rank_b) + " passed " + std::to_string(b.bytes) +
                                                   " bytes, " + who(rank_a) + " " +
                                                   std::to_string(a.bytes)};
  return std::nullopt;
}

std::variant<std::optional<PlannedCopy>, PlanError> plan_pair(const RankArgs& s, uint32_t src,
                                                              const RankArgs& d, uint32_t dst) {
  if (src == dst && s.self_copy_done) return std::optional<PlannedCopy>{};
  const uint64_t b = s.bytes;
  switch (s.kind) {
    case CollectiveKind::kAllGather:
      return copy(src, s.send_offset, dst, d.recv_offset + uint64_t{src} * b, b);
    case CollectiveKind::kAllToAll:
      return copy(src, s.send_offset + uint64_t{dst} * b, dst, d.recv_offset + uint64_t{src} * b,
                  b);
    case CollectiveKind::kAllToAllV: {
      const uint64_t sent = s.send_counts[dst];
      const uint64_t expected = d.recv_counts[src];
      if (sent != expected)
        return PlanError{ErrorCode::kSizeMismatch, "rank " + std::to_string(src) + " sends " +
                                                       std::to_string(sent) + " bytes to rank " +
                                                       std::to_string(dst) + ", which expects " +
                                                       std::to_string(expected)};
      return copy(src, s.send_offset + s.send_displs[dst], dst, d.recv_offset + d.recv_displs[src],
                  sent);
    }
    case CollectiveKind::kBroadcast:
      if (src != s.root || dst == s.root) return std::optional<PlannedCopy>{};
      return copy(src, s.send_offset, dst, d.recv_offset, b);
    case CollectiveKind::kGather:
      if (dst != s.root) return std::optional<PlannedCopy>{};
      return copy(src, s.send_offset, dst, d.recv_offset + uint64_t{src} * b, b);
    case CollectiveKind::kScatter:
      if (src != s.root) return std::optional<PlannedCopy>{};
      return copy(src, s.send_offset + uint64_t{dst} * b, dst, d.recv_offset, b);
    case CollectiveKind::kBarrier:
      return std::optional<PlannedCopy>{};
    case CollectiveKind::kNop:
      break;
  }
  return PlanError{ErrorCode::kInvalidArgument, "not a collective"};
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
