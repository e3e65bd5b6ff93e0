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

std::vector<PlannedPiece> SdmaPlanner::plan(std::span<const CopyShape> copies) {
  // Largest first (greedy balancing), then put back in the callers' order.
  std::vector<std::size_t> order(copies.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return copies[a].bytes > copies[b].bytes; });
  std::vector<std::vector<PlannedPiece>> per_copy(copies.size());
  for (std::size_t i : order) {
    const CopyShape& c = copies[i];
    const int agent = c.src_device != kHostAgent ? c.src_device : c.dst_device;
    if (agent >= static_cast<int>(load_.size()))
      throw std::out_of_range("SdmaPlanner: device " + std::to_string(agent) + " out of range");
    const PairEngines pair =
        agent == kHostAgent ? PairEngines{} : lookup_(c.src_device, c.dst_device);
    const uint32_t mask = usable_engines(pair);
    if (mask == 0) {
      per_copy[i].push_back({i, 0, c.bytes, agent, 0});
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
      per_copy[i].push_back({i, at, bytes, agent, uint32_t{1} << e});
      at += bytes;
    } while (at < c.bytes);
  }
  std::vector<PlannedPiece> out;
  for (auto& pieces : per_copy) out.insert(out.end(), pieces.begin(), pieces.end());
  return out;
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
