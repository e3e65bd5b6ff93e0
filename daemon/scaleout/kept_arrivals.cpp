#include "daemon/scaleout/kept_arrivals.hpp"

namespace iris::daemon {

void KeptArrivals::keep(Arrival arrival) {
  bytes_ += arrival.data ? arrival.data->bytes : 0;
  const auto key = std::make_tuple(arrival.seq, arrival.node, arrival.rank);
  if (auto old = kept_.find(key); old != kept_.end()) {
    bytes_ -= old->second.data ? old->second.data->bytes : 0;
    old->second = std::move(arrival);
  } else {
    kept_.emplace(key, std::move(arrival));
  }
  while (!kept_.empty() && (bytes_ > max_bytes_ || kept_.size() > kMaxArrivals)) {
    auto oldest = kept_.begin();
    auto& dropped = dropped_[oldest->second.node];
    if (dropped.size() < kMaxArrivals)
      dropped.insert(oldest->second.seq);
    else
      overflowed_.insert(oldest->second.node);
    drop(oldest);
  }
}

void KeptArrivals::drop(std::map<std::tuple<uint64_t, uint32_t, uint32_t>, Arrival>::iterator it) {
  bytes_ -= it->second.data ? it->second.data->bytes : 0;
  kept_.erase(it);
}

void KeptArrivals::release(uint32_t node, uint64_t seq) {
  for (auto it = kept_.lower_bound(std::make_tuple(seq, node, uint32_t{0}));
       it != kept_.end() && std::get<0>(it->first) == seq && std::get<1>(it->first) == node;)
    drop(it++);
  if (auto d = dropped_.find(node); d != dropped_.end()) {
    d->second.erase(seq);
    if (d->second.empty()) dropped_.erase(d);
  }
}

std::vector<KeptArrivals::Arrival> KeptArrivals::to_send_again(
    uint32_t node, const std::function<bool(uint64_t)>& completed, std::optional<uint64_t>& lost) {
  lost.reset();
  if (auto d = dropped_.find(node); d != dropped_.end()) {
    for (uint64_t seq : d->second)
      if (!completed(seq)) {
        lost = seq;
        break;
      }
    dropped_.erase(d);
  }
  if (overflowed_.erase(node) != 0 && !lost) lost = 0;
  std::vector<Arrival> again;
  for (auto it = kept_.begin(); it != kept_.end();) {
    if (it->second.node != node) {
      ++it;
    } else if (completed(it->second.seq)) {
      drop(it++);
    } else {
      again.push_back(it->second);
      ++it;
    }
  }
  return again;
}

}  // namespace iris::daemon
