// The choice of the next slice (fair_share.hpp).
#include "daemon/engines/fair_share.hpp"

#include <algorithm>

namespace iris::daemon {

void FairShare::set_weight(uint32_t uid, uint32_t weight) { weights_[uid] = std::max(weight, 1u); }

uint64_t FairShare::quantum(uint32_t uid) const {
  const auto it = weights_.find(uid);
  return (it == weights_.end() ? 1 : it->second) * std::max<uint64_t>(options_.slice_bytes, 1);
}

void FairShare::push(const FlowKey& flow, uint64_t item, uint64_t bytes) {
  ClassQueue& c = classes_[static_cast<std::size_t>(flow.cls)];
  auto [uid, new_uid] = c.by_uid.try_emplace(flow.uid);
  if (new_uid || uid->second.comms.empty()) {
    if (std::find(c.uids.begin(), c.uids.end(), flow.uid) == c.uids.end())
      c.uids.push_back(flow.uid);
  }
  auto& waiting = uid->second.by_comm[flow.comm];
  if (waiting.empty()) uid->second.comms.push_back(flow.comm);
  waiting.push_back({item, 0, bytes});
  ++waiting_;
}

std::optional<FairShare::Slice> FairShare::next() {
  const bool latency = !classes_[0].uids.empty(), bulk = !classes_[1].uids.empty();
  if (!latency && !bulk) return std::nullopt;
  if (latency && (!bulk || latency_in_a_row_ + 1 < options_.bulk_every)) {
    latency_in_a_row_ = bulk ? latency_in_a_row_ + 1 : 0;
    return next_in(TrafficClass::kLatency);
  }
  latency_in_a_row_ = 0;
  return next_in(TrafficClass::kBulk);
}

std::optional<FairShare::Slice> FairShare::next(TrafficClass cls) {
  if (classes_[static_cast<std::size_t>(cls)].uids.empty()) return std::nullopt;
  return next_in(cls);
}

std::optional<FairShare::Slice> FairShare::next_in(TrafficClass cls) {
  ClassQueue& c = classes_[static_cast<std::size_t>(cls)];
  for (;;) {
    const uint32_t uid = c.uids.front();
    UidQueue& u = c.by_uid.at(uid);
    const uint64_t comm = u.comms.front();
    std::deque<Pending>& waiting = u.by_comm.at(comm);
    Pending& p = waiting.front();
    const uint64_t bytes = std::min(p.bytes - p.offset, options_.slice_bytes);
    if (u.deficit < static_cast<int64_t>(bytes)) {
      // Its turn is spent: a quantum for the next round, and the next uid's turn.
      u.deficit += static_cast<int64_t>(quantum(uid));
      c.uids.push_back(uid);
      c.uids.pop_front();
      continue;
    }
    u.deficit -= static_cast<int64_t>(bytes);
    Slice s{p.item, p.offset, bytes, p.offset + bytes >= p.bytes, {uid, comm, cls}};
    p.offset += bytes;
    if (s.last) {
      waiting.pop_front();
      --waiting_;
    }
    // The communicator's turn ends with the slice; the uid keeps the rest of its quantum.
    u.comms.pop_front();
    if (!waiting.empty()) {
      u.comms.push_back(comm);
    } else {
      u.by_comm.erase(comm);
    }
    if (u.comms.empty()) {
      c.uids.pop_front();
      c.by_uid.erase(uid);  // an idle uid keeps no credit
    }
    return s;
  }
}

}  // namespace iris::daemon
