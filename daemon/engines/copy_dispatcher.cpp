#include "daemon/engines/copy_dispatcher.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>

namespace iris::daemon {

namespace {
// bytes x scale, at most UINT64_MAX (an operator may set a bound of "everything").
uint64_t times(uint64_t bytes, uint32_t scale) {
  return bytes > UINT64_MAX / scale ? UINT64_MAX : bytes * scale;
}
}  // namespace

uint64_t queue_bytes_for(const std::string& engine_name) {
  return engine_name == "host" ? 8ull << 20 : 4ull << 20;
}

CopyDispatcher::CopyDispatcher(Engine& engine, Stats& stats, Pacing pacing,
                               Clock::time_point (*now)())
    : engine_(engine), stats_(stats), pacing_(pacing), now_(now), lanes_(2 * kDeviceSlots) {
  if (pacing_.queue_bytes == kEngineQueueBytesAuto)
    pacing_.queue_bytes = queue_bytes_for(engine.description().name);
}

CopyDispatcher::Slot& CopyDispatcher::take_slot(CopyRequest& copy) {
  uint32_t index;
  if (free_slots_.empty()) {
    index = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
  } else {
    index = free_slots_.back();
    free_slots_.pop_back();
  }
  Slot& slot = slots_[index];
  slot.used = true;
  ++slot.generation;
  slot.device = device_slot(copy.src_device, copy.dst_device);
  slot.slices_out = 0;
  slot.in_flight_bytes = 0;
  slot.all_issued = false;
  slot.error = ErrorCode::kOk;
  add_from_loop(stats_.devices[slot.device].copies_in_flight, 1);
  copy.cookie = (uint64_t{slot.generation} << 32) | index;
  return slot;
}

CopyDispatcher::Slot* CopyDispatcher::slot_of(uint64_t cookie) {
  const uint64_t index = cookie & 0xffffffffu;
  if (index >= slots_.size() || !slots_[index].used ||
      slots_[index].generation != static_cast<uint32_t>(cookie >> 32))
    return nullptr;
  return &slots_[index];
}

std::size_t CopyDispatcher::open_lane(std::size_t device, uint32_t scale) {
  const std::size_t index = scale > 1 ? kDeviceSlots + device : device;
  auto& l = lanes_[index];
  if (!l) {
    const uint64_t slice = times(pacing_.slice_bytes, scale);
    l = std::make_unique<Lane>(FairShare::Options{slice, pacing_.bulk_every},
                               times(pacing_.queue_bytes, scale), slice);
    // Slot 0 is host memory; the last slot also counts the devices past the slots.
    l->latency_engine = device > 0 && device + 1 < kDeviceSlots &&
                        engine_.keeps_latency_engine(static_cast<int>(device) - 1);
    l->latency_bound = l->latency_engine || engine_.serves_latency_first();
    for (const auto& [uid, weight] : weights_) l->fair.set_weight(uid, weight);
  }
  return index;
}

TrafficClass CopyDispatcher::class_of(uint64_t largest_copy, RequestedClass requested,
                                      bool granted) const {
  if (requested == RequestedClass::kBulk) return TrafficClass::kBulk;
  if (requested == RequestedClass::kLatency && granted) return TrafficClass::kLatency;
  return largest_copy <= pacing_.latency_max_bytes ? TrafficClass::kLatency : TrafficClass::kBulk;
}

bool CopyDispatcher::pacing_now() const {
  if (pacing_.queue_bytes == 0) return false;
  if (users_ > 1) return true;
  // A node never shared reads no clock (asked on every arrival of a small collective).
  return shared_until_ != Clock::time_point{} && now_() < shared_until_;
}

std::size_t CopyDispatcher::user_slot(uint32_t uid) {
  const auto found = user_slots_.find(uid);
  if (found != user_slots_.end()) return found->second;
  std::size_t slot = kUserSlots - 1;  // the users past the others' slots share it
  if (user_slots_.size() < kUserSlots - 1) {
    slot = user_slots_.size();
    user_slots_.emplace(uid, slot);
    stats_.users[slot].uid.store(uid, std::memory_order_relaxed);
  }
  stats_.users[slot].used.store(true, std::memory_order_release);
  return slot;
}

void CopyDispatcher::set_weight(uint32_t uid, uint32_t weight) {
  weights_[uid] = weight;
  for (auto& l : lanes_)
    if (l) l->fair.set_weight(uid, weight);
}

void CopyDispatcher::track(CopyRequest& copy, CopyOwner& owner, uint64_t tag) {
  Slot& slot = take_slot(copy);
  slot.owner = &owner;
  slot.tag = tag;
}

void CopyDispatcher::submit(std::span<const CopyRequest> copies, const FlowKey& flow) {
  if (copies.empty()) return;
  const auto now = now_();
  batch_.clear();
  paced_lanes_.clear();
  bool all_whole = true;
  const std::size_t user = user_slot(flow.uid);
  for (const CopyRequest& c : copies) {
    Slot& slot = *slot_of(c.cookie);
    slot.cls = flow.cls;
    slot.uid = flow.uid;
    slot.user = user;
    slot.bytes = c.bytes;
    const uint32_t scale = std::max(engine_.pace_scale(c), 1u);
    slot.lane = open_lane(slot.device, scale);
    Lane& l = *lanes_[slot.lane];
    if (flow.uid != kDaemonUid) {  // irisd's staging shares with its job
      const auto of = l.copies_of.find(flow.uid);
      if (of != l.copies_of.end())
        ++of->second;
      else
        l.copies_of_spares.put(l.copies_of, flow.uid) = 1;
    }
    if (flow.cls == TrafficClass::kLatency) l.latency_until = now + kSharedHold;
    if (l.copies_of.size() > 1 || users_ > 1) shared_until_ = l.shared_until = now + kSharedHold;
    if (pacing_.queue_bytes == 0 || (now >= l.shared_until && l.fair.empty())) {
      slot.slices_out = 1;  // whole, straight to the engine
      slot.in_flight_bytes = c.bytes;
      slot.all_issued = true;
      if (l.in_flight == 0) l.busy_from = now;
      l.in_flight += c.bytes;
      if (flow.cls == TrafficClass::kLatency) l.latency_in_flight += c.bytes;
      batch_.push_back(c);
      continue;
    }
    all_whole = false;
    slot.request = c;
    slot.queued_at = now;
    l.fair.push(flow, c.cookie, c.bytes);
    if (std::find(paced_lanes_.begin(), paced_lanes_.end(), slot.lane) == paced_lanes_.end())
      paced_lanes_.push_back(slot.lane);
  }
  if (all_whole) {
    batch_.clear();
    engine_.submit(copies);
  } else if (!batch_.empty()) {
    engine_.submit(batch_);
  }
  batch_.clear();
  for (std::size_t index : paced_lanes_) pump(index);
}

void CopyDispatcher::pump(std::size_t index) {
  Lane& l = *lanes_[index];
  batch_.clear();
  const auto now = now_();
  const uint64_t bound = l.bound;
  if (l.latency_bound) {
    while (l.latency_in_flight < bound && take(l, l.fair.next(TrafficClass::kLatency), now)) {
    }
    // Beside latency work on a GPU's kept copy engine bulk gets half the bound, in half slices (the
    // header says why); an engine that serves latency first needs no such room.
    const bool beside_latency = l.latency_engine && now < l.latency_until;
    const uint64_t bulk_bound = beside_latency ? std::max<uint64_t>(bound / 2, 1) : bound;
    const uint64_t bulk_slice = beside_latency ? l.slice / 2 : l.slice;
    while (l.in_flight - l.latency_in_flight < bulk_bound &&
           take(l, l.fair.next(TrafficClass::kBulk, bulk_slice), now)) {
    }
  } else {
    while (l.in_flight < bound && take(l, l.fair.next(), now)) {
    }
  }
  if (batch_.empty()) return;
  engine_.submit(batch_);
  batch_.clear();  // the requests hold the buffers: only the engine may keep them now
}

bool CopyDispatcher::take(Lane& l, const std::optional<FairShare::Slice>& s,
                          Clock::time_point now) {
  if (!s) return false;
  Slot& slot = *slot_of(s->item);
  if (s->offset == 0) {
    const auto waited =
        std::chrono::duration_cast<std::chrono::microseconds>(now - slot.queued_at).count();
    stats_.count_queue_delay(static_cast<std::size_t>(slot.cls),
                             static_cast<uint64_t>(std::max<int64_t>(waited, 0)));
  }
  CopyRequest piece = slot.request;
  piece.src += s->offset;
  piece.dst += s->offset;
  piece.bytes = s->bytes;
  const bool latency = slot.cls == TrafficClass::kLatency;
  piece.queue = latency ? (l.latency_bound ? EngineQueue::kLatency : EngineQueue::kAny)
                : l.latency_engine && now < l.latency_until ? EngineQueue::kBulk
                                                            : EngineQueue::kAny;
  ++slot.slices_out;
  slot.in_flight_bytes += s->bytes;
  slot.all_issued = s->last;
  if (l.in_flight == 0) l.busy_from = now;
  l.in_flight += s->bytes;
  if (latency) l.latency_in_flight += s->bytes;
  batch_.push_back(std::move(piece));
  return true;
}

void CopyDispatcher::submit_one(CopyRequest copy, std::function<void(ErrorCode)> done) {
  Slot& slot = take_slot(copy);
  slot.owner = nullptr;
  slot.done = std::move(done);
  // irisd's own copies (scale-out staging) wait like a tenant's bulk transfer.
  submit(std::span<const CopyRequest>(&copy, 1), FlowKey{kDaemonUid, 0, TrafficClass::kBulk});
}

void CopyDispatcher::copy_now(std::span<const HostCopy> copies, uint64_t bytes,
                              const FlowKey& flow) {
  if (copies.empty()) return;
  const auto start = now_();
  engine_.copy_now(copies);
  const auto took = now_() - start;
  count(device_slot(kHostMemory, kHostMemory), ErrorCode::kOk, TransferPath::kComputeUnits, bytes,
        copies.size(), false);
  stats_.count_engine_work(
      static_cast<std::size_t>(flow.cls), user_slot(flow.uid), bytes,
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(took).count()));
}

bool CopyDispatcher::poll() {
  completions_.clear();
  if (engine_.poll(completions_) == 0) return false;
  for (const CopyCompletion& c : completions_) complete(c);
  return true;
}

void CopyDispatcher::complete(const CopyCompletion& completion) {
  Slot* slot = slot_of(completion.cookie);
  if (slot == nullptr || slot->slices_out == 0) {
    spdlog::error("engine completed unknown copy {}", completion.cookie);
    return;
  }
  const uint64_t bytes = std::min(completion.bytes, slot->in_flight_bytes);
  slot->in_flight_bytes -= bytes;
  --slot->slices_out;
  if (completion.code != ErrorCode::kOk && slot->error == ErrorCode::kOk)
    slot->error = completion.code;
  slot->path = completion.path;
  count_bytes(slot->device, completion.code, completion.path, completion.bytes);
  const std::size_t index = slot->lane;
  Lane& l = *lanes_[index];
  const auto now = now_();
  // The engine's own account of its time where it has one; else the time since the device's
  // last completion (or since it became busy).
  const auto busy = now - std::max(l.busy_from, l.last_done);
  l.last_done = now;
  const uint64_t engine_ns =
      completion.engine_ns != 0
          ? completion.engine_ns
          : static_cast<uint64_t>(std::max<int64_t>(
                std::chrono::duration_cast<std::chrono::nanoseconds>(busy).count(), 0));
  stats_.count_engine_work(static_cast<std::size_t>(slot->cls), slot->user, completion.bytes,
                           engine_ns);
  l.in_flight -= std::min(bytes, l.in_flight);
  if (slot->cls == TrafficClass::kLatency)
    l.latency_in_flight -= std::min(bytes, l.latency_in_flight);
  if (slot->all_issued && slot->slices_out == 0) {
    const auto of = l.copies_of.find(slot->uid);
    if (of != l.copies_of.end() && --of->second == 0) l.copies_of_spares.erase(l.copies_of, of);
    finish(static_cast<uint32_t>(completion.cookie & 0xffffffffu), completion);
  }
  if (!l.fair.empty()) pump(index);
}

void CopyDispatcher::finish(uint32_t index, const CopyCompletion& last) {
  Slot& slot = slots_[index];
  slot.used = false;
  slot.request = {};  // lets go of the buffers' owners
  free_slots_.push_back(index);
  const CopyCompletion whole{last.cookie, slot.error, slot.path, slot.bytes};
  count_copy(slot.device, slot.error);
  // The owner may queue copies (and so reuse this slot) from its callback: read it out first.
  if (slot.owner != nullptr) return slot.owner->copy_done(slot.tag, whole);
  std::function<void(ErrorCode)> done = std::move(slot.done);
  slot.done = nullptr;
  done(whole.code);
}

void CopyDispatcher::count(std::size_t slot, ErrorCode code, TransferPath path, uint64_t bytes,
                           uint64_t copies, bool were_in_flight) {
  count_bytes(slot, code, path, bytes);
  DeviceCounters& device = stats_.devices[slot];
  const auto n = static_cast<int64_t>(copies);
  if (were_in_flight) add_from_loop(device.copies_in_flight, -n);
  add_from_loop(device.copies_total, n);
  if (code != ErrorCode::kOk) add_from_loop(device.copy_errors_total, n);
}

void CopyDispatcher::count_bytes(std::size_t slot, ErrorCode code, TransferPath path,
                                 uint64_t bytes) {
  DeviceCounters& device = stats_.devices[slot];
  if (code == ErrorCode::kOk) {
    device.failing_streak.store(0, std::memory_order_relaxed);
    auto& by_path = path == TransferPath::kCopyEngine ? device.copy_engine_bytes_total
                                                      : device.compute_unit_bytes_total;
    add_from_loop(by_path, static_cast<int64_t>(bytes));
  } else {
    add_from_loop(device.failing_streak, 1);
  }
}

void CopyDispatcher::count_copy(std::size_t slot, ErrorCode code) {
  DeviceCounters& device = stats_.devices[slot];
  add_from_loop(device.copies_in_flight, -1);
  add_from_loop(device.copies_total, 1);
  if (code != ErrorCode::kOk) add_from_loop(device.copy_errors_total, 1);
}

}  // namespace iris::daemon
