#include "daemon/engines/copy_dispatcher.hpp"

#include <spdlog/spdlog.h>

namespace iris::daemon {

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
  add_from_loop(stats_.devices[slot.device].copies_in_flight, 1);
  copy.cookie = (uint64_t{slot.generation} << 32) | index;
  return slot;
}

void CopyDispatcher::track(CopyRequest& copy, CopyOwner& owner, uint64_t tag) {
  Slot& slot = take_slot(copy);
  slot.owner = &owner;
  slot.tag = tag;
}

void CopyDispatcher::submit_one(CopyRequest copy, std::function<void(ErrorCode)> done) {
  Slot& slot = take_slot(copy);
  slot.owner = nullptr;
  slot.done = std::move(done);
  engine_.submit(std::span<const CopyRequest>(&copy, 1));
}

void CopyDispatcher::copy_now(std::span<const HostCopy> copies, uint64_t bytes) {
  if (copies.empty()) return;
  engine_.copy_now(copies);
  count(device_slot(kHostMemory, kHostMemory), ErrorCode::kOk, TransferPath::kComputeUnits, bytes,
        copies.size(), false);
}

bool CopyDispatcher::poll() {
  completions_.clear();
  if (engine_.poll(completions_) == 0) return false;
  for (const CopyCompletion& c : completions_) complete(c);
  return true;
}

void CopyDispatcher::complete(const CopyCompletion& completion) {
  const uint64_t index = completion.cookie & 0xffffffffu;
  if (index >= slots_.size() || !slots_[index].used ||
      slots_[index].generation != static_cast<uint32_t>(completion.cookie >> 32)) {
    spdlog::error("engine completed unknown copy {}", completion.cookie);
    return;
  }
  Slot& slot = slots_[index];
  slot.used = false;
  free_slots_.push_back(static_cast<uint32_t>(index));
  count(slot.device, completion.code, completion.path, completion.bytes, 1, true);
  // The owner may queue copies (and so reuse this slot) from its callback: read it out first.
  if (slot.owner != nullptr) return slot.owner->copy_done(slot.tag, completion);
  std::function<void(ErrorCode)> done = std::move(slot.done);
  slot.done = nullptr;
  done(completion.code);
}

void CopyDispatcher::count(std::size_t slot, ErrorCode code, TransferPath path, uint64_t bytes,
                           uint64_t copies, bool were_in_flight) {
  DeviceCounters& device = stats_.devices[slot];
  const auto n = static_cast<int64_t>(copies);
  if (were_in_flight) add_from_loop(device.copies_in_flight, -n);
  add_from_loop(device.copies_total, n);
  if (code == ErrorCode::kOk) {
    device.failing_streak.store(0, std::memory_order_relaxed);
    auto& by_path = path == TransferPath::kCopyEngine ? device.copy_engine_bytes_total
                                                      : device.compute_unit_bytes_total;
    add_from_loop(by_path, static_cast<int64_t>(bytes));
  } else {
    add_from_loop(device.copy_errors_total, n);
    add_from_loop(device.failing_streak, n);
  }
}

}  // namespace iris::daemon
