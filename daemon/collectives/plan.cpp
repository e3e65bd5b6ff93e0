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

std::optional<SourceBlock> source_block(const RankArgs& s, uint32_t src, uint32_t dst) {
  const uint64_t b = s.bytes;
  std::optional<SourceBlock> block;
  switch (s.kind) {
    case CollectiveKind::kAllGather:
      block = SourceBlock{s.send_offset, b};
      break;
    case CollectiveKind::kAllToAll:
      block = SourceBlock{s.send_offset + uint64_t{dst} * b, b};
      break;
    case CollectiveKind::kAllToAllV:
      block = SourceBlock{s.send_offset + s.send_displs[dst], s.send_counts[dst]};
      break;
    case CollectiveKind::kBroadcast:
      if (src == s.root && dst != s.root) block = SourceBlock{s.send_offset, b};
      break;
    case CollectiveKind::kGather:
      if (dst == s.root) block = SourceBlock{s.send_offset, b};
      break;
    case CollectiveKind::kScatter:
      if (src == s.root) block = SourceBlock{s.send_offset + uint64_t{dst} * b, b};
      break;
    case CollectiveKind::kBarrier:
    case CollectiveKind::kNop:
      break;
  }
  if (block && block->bytes == 0) return std::nullopt;
  return block;
}

std::variant<std::optional<PlannedCopy>, PlanError> plan_pair(const RankArgs& s, uint32_t src,
                                                              const RankArgs& d, uint32_t dst) {
  if (s.kind == CollectiveKind::kNop)
    return PlanError{ErrorCode::kInvalidArgument, "not a collective"};
  if (src == dst && s.self_copy_done) return std::optional<PlannedCopy>{};
  if (s.kind == CollectiveKind::kAllToAllV && s.send_counts[dst] != d.recv_counts[src])
    return PlanError{ErrorCode::kSizeMismatch, "rank " + std::to_string(src) + " sends " +
                                                   std::to_string(s.send_counts[dst]) +
                                                   " bytes to rank " + std::to_string(dst) +
                                                   ", which expects " +
                                                   std::to_string(d.recv_counts[src])};
  const auto from = source_block(s, src, dst);
  if (!from) return std::optional<PlannedCopy>{};
  uint64_t to = d.recv_offset;  // broadcast, scatter: the whole receive range
  switch (s.kind) {
    case CollectiveKind::kAllGather:
    case CollectiveKind::kAllToAll:
    case CollectiveKind::kGather:
      to += uint64_t{src} * s.bytes;
      break;
    case CollectiveKind::kAllToAllV:
      to += d.recv_displs[src];
      break;
    default:
      break;
  }
  return PlannedCopy{src, from->offset, dst, to, from->bytes};
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
