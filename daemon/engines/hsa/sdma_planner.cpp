#include "daemon/engines/hsa/sdma_planner.hpp"

#include <algorithm>
#include <bit>
#include <numeric>
#include <stdexcept>

namespace iris::daemon::hsa {

uint32_t usable_engines(const PairEngines& pair) {
  const uint32_t recommended = pair.available & pair.preferred;
  return recommended != 0 ? recommended : pair.available;
}

uint32_t engines_for(uint32_t usable, EngineQueue queue) {
  if (queue == EngineQueue::kAny || std::popcount(usable) < 2) return usable;
  const uint32_t kept = uint32_t{1} << (31 - std::countl_zero(usable));
  return queue == EngineQueue::kLatency ? kept : usable & ~kept;
}

SdmaPlanner::SdmaPlanner(int devices, PairLookup lookup, uint64_t split_bytes)
    : lookup_(std::move(lookup)), split_bytes_(split_bytes), load_(std::max(devices, 0)) {}

int SdmaPlanner::least_loaded(int device, uint32_t mask, uint32_t taken) const {
  int best = -1;
  for (uint32_t left = mask & ~taken; left != 0; left &= left - 1) {
    const int e = std::countr_zero(left);
    const Load& l = load_[device][e];
    if (best < 0 || l.bytes < load_[device][best].bytes ||
        (l.bytes == load_[device][best].bytes && l.pieces < load_[device][best].pieces))
      best = e;
  }
  return best;
}

const std::vector<PlannedPiece>& SdmaPlanner::plan(std::span<const CopyShape> copies) {
  // Largest first (greedy balancing; ties in the callers' order), then put back in the callers'
  // order. Into scratch kept from call to call: a submit allocates nothing once they have grown.
  order_.resize(copies.size());
  std::iota(order_.begin(), order_.end(), 0);
  std::sort(order_.begin(), order_.end(), [&](std::size_t a, std::size_t b) {
    return copies[a].bytes > copies[b].bytes || (copies[a].bytes == copies[b].bytes && a < b);
  });
  by_size_.clear();
  for (std::size_t i : order_) {
    const CopyShape& c = copies[i];
    const int agent = c.src_device != kHostAgent ? c.src_device : c.dst_device;
    if (agent >= static_cast<int>(load_.size()))
      throw std::out_of_range("SdmaPlanner: device " + std::to_string(agent) + " out of range");
    const PairEngines pair =
        agent == kHostAgent ? PairEngines{} : lookup_(c.src_device, c.dst_device);
    const uint32_t mask = engines_for(usable_engines(pair), c.queue);
    if (mask == 0) {
      by_size_.push_back({i, 0, c.bytes, agent, 0});
      continue;
    }
    const int engines = std::popcount(mask);
    // Split only across engines recommended for the pair (its link's): the status alone says
    // which engines were free when asked, every xGMI engine on an idle MI300X, and cutting a
    // copy into that many pieces only adds overhead.
    const bool split =
        split_bytes_ != 0 && c.bytes >= split_bytes_ && engines > 1 && (pair.preferred & mask) != 0;
    // Whole pages per piece (the last takes the rest), never more pieces than engines.
    const uint64_t piece =
        split ? std::max<uint64_t>(
                    4096, (c.bytes / static_cast<uint64_t>(engines) + 4095) & ~uint64_t{4095})
              : std::max<uint64_t>(c.bytes, 1);
    uint32_t taken = 0;
    uint64_t at = 0;
    do {
      const uint64_t bytes = std::min(piece, c.bytes - at);
      const int e = least_loaded(agent, mask, taken);
      taken |= uint32_t{1} << e;
      load_[agent][e].bytes += bytes;
      ++load_[agent][e].pieces;
      by_size_.push_back({i, at, bytes, agent, uint32_t{1} << e});
      at += bytes;
    } while (at < c.bytes);
  }
  // Each copy's pieces, in order, where its place in the callers' order puts them.
  first_piece_.assign(copies.size() + 1, 0);
  for (const PlannedPiece& p : by_size_) ++first_piece_[p.copy + 1];
  for (std::size_t i = 1; i < first_piece_.size(); ++i) first_piece_[i] += first_piece_[i - 1];
  planned_.resize(by_size_.size());
  for (const PlannedPiece& p : by_size_) planned_[first_piece_[p.copy]++] = p;
  return planned_;
}

void SdmaPlanner::finished(const PlannedPiece& piece) {
  if (piece.engine == 0 || piece.copy_agent == kHostAgent) return;
  Load& l = load_[piece.copy_agent][std::countr_zero(piece.engine)];
  l.bytes -= std::min(l.bytes, piece.bytes);
  if (l.pieces > 0) --l.pieces;
}

uint64_t SdmaPlanner::queued_bytes(int device, int engine_index) const {
  return load_.at(device).at(engine_index).bytes;
}

uint32_t SdmaPlanner::queued_pieces(int device, int engine_index) const {
  return load_.at(device).at(engine_index).pieces;
}

}  // namespace iris::daemon::hsa
