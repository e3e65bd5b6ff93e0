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
  const auto found_uid = c.by_uid.find(flow.uid);
  UidQueue& u =
      found_uid != c.by_uid.end() ? found_uid->second : uid_spares_.put(c.by_uid, flow.uid);
  if (u.comms.empty() && !c.uids.contains(flow.uid)) c.uids.push_back(flow.uid);
  const auto found_comm = u.by_comm.find(flow.comm);
  Fifo<Pending>& waiting =
      found_comm != u.by_comm.end() ? found_comm->second : comm_spares_.put(u.by_comm, flow.comm);
  if (waiting.empty()) u.comms.push_back(flow.comm);
  waiting.push_back({item, 0, bytes});
  ++waiting_;
}

std::optional<FairShare::Slice> FairShare::next() {
  const bool latency = !classes_[0].uids.empty(), bulk = !classes_[1].uids.empty();
  if (!latency && !bulk) return std::nullopt;
  if (latency && (!bulk || latency_in_a_row_ + 1 < options_.bulk_every)) {
    latency_in_a_row_ = bulk ? latency_in_a_row_ + 1 : 0;
    return next_in(TrafficClass::kLatency, options_.slice_bytes);
  }
  latency_in_a_row_ = 0;
  return next_in(TrafficClass::kBulk, options_.slice_bytes);
}

std::optional<FairShare::Slice> FairShare::next(TrafficClass cls, uint64_t slice_bytes) {
  if (classes_[static_cast<std::size_t>(cls)].uids.empty()) return std::nullopt;
  return next_in(cls, std::max<uint64_t>(std::min(slice_bytes, options_.slice_bytes), 1));
}

std::optional<FairShare::Slice> FairShare::next_in(TrafficClass cls, uint64_t slice_bytes) {
  ClassQueue& c = classes_[static_cast<std::size_t>(cls)];
  for (;;) {
    const uint32_t uid = c.uids.front();
    UidQueue& u = c.by_uid.at(uid);
    const uint64_t comm = u.comms.front();
    Fifo<Pending>& waiting = u.by_comm.at(comm);
    Pending& p = waiting.front();
    const uint64_t bytes = std::min(p.bytes - p.offset, slice_bytes);
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
      comm_spares_.erase(u.by_comm, u.by_comm.find(comm));
    }
    if (u.comms.empty()) {
      c.uids.pop_front();
      uid_spares_.erase(c.by_uid, c.by_uid.find(uid));  // an idle uid keeps no credit
    }
    return s;
  }
}

}  // namespace iris::daemon
