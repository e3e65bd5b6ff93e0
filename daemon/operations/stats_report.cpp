#include "daemon/operations/stats_report.hpp"

#include <algorithm>

namespace iris::daemon {

std::size_t gpu_count(const EngineDescription& engine) {
  return engine.name == "host" ? 0 : engine.devices.size();
}

std::string device_label(std::size_t slot) { return slot == 0 ? "host" : std::to_string(slot - 1); }

namespace {
void fill_histogram(const LatencyHistogram& h, v1::LatencyHistogram& out) {
  auto load = [](const std::atomic<uint64_t>& v) { return v.load(std::memory_order_relaxed); };
  for (uint64_t bound : kLatencyBoundsUs) out.add_upper_bound_us(bound);
  for (const auto& b : h.buckets) out.add_bucket_counts(load(b));
  out.set_count(load(h.count));
  out.set_sum_us(load(h.sum_us));
}
}  // namespace

void fill_stats(const Stats& stats, std::size_t devices, v1::GetStatsResponse& out,
                const UsersShown& users_shown) {
  const auto* descriptor = out.GetDescriptor();
  const auto* reflection = out.GetReflection();
  auto load = [](const std::atomic<uint64_t>& v) { return v.load(std::memory_order_relaxed); };
  auto set = [&](const char* name, const std::atomic<uint64_t>& value) {
    // Every counter has its field (Stats.CountersMatchTheProto checks it).
    reflection->SetUInt64(&out, descriptor->FindFieldByName(name), load(value));
  };
#define IRIS_STATS_FILL(name, kind, help) set(#name, stats.name);
  IRIS_STATS_COUNTERS(IRIS_STATS_FILL)
#undef IRIS_STATS_FILL
  for (uint32_t i = 1; i < kErrorCodeCount; ++i) {
    const uint64_t n = load(stats.errors[i]);
    if (n == 0) continue;
    auto* e = out.add_errors();
    e->set_code(std::string(to_string(static_cast<ErrorCode>(i))));
    e->set_count(n);
  }
  uint64_t outcomes[2] = {0, 0};
  for (uint32_t op = 0; op < kOpSlots; ++op) {
    const std::string op_name(shm::opcode_name(static_cast<shm::Opcode>(op)));
    for (std::size_t o = 0; o < 2; ++o) {
      const uint64_t n = load(stats.collectives[op][o]);
      outcomes[o] += n;
      if (n == 0) continue;
      auto* c = out.add_collectives();
      c->set_op(op_name);
      c->set_outcome(kOutcomeNames[o]);
      c->set_count(n);
    }
    for (std::size_t size = 0; size < kSizeClasses; ++size) {
      const LatencyHistogram& h = stats.latency[op][size];
      if (load(h.count) == 0) continue;
      auto* l = out.add_latency();
      l->set_op(op_name);
      l->set_size_class(kSizeClassNames[size]);
      fill_histogram(h, *l);
    }
  }
  out.set_collectives_completed_total(outcomes[static_cast<std::size_t>(Outcome::kCompleted)]);
  out.set_collectives_failed_total(outcomes[static_cast<std::size_t>(Outcome::kFailed)]);
  uint64_t copy_engine = 0, compute_units = 0, copies = 0;
  const std::size_t slots = std::min(devices + 1, kDeviceSlots);
  for (std::size_t slot = 0; slot < slots; ++slot) {
    const DeviceCounters& d = stats.devices[slot];
    auto* dev = out.add_devices();
    dev->set_device(device_label(slot));
    dev->set_copy_engine_bytes_total(load(d.copy_engine_bytes_total));
    dev->set_compute_unit_bytes_total(load(d.compute_unit_bytes_total));
    dev->set_copies_total(load(d.copies_total));
    dev->set_copy_errors_total(load(d.copy_errors_total));
    dev->set_copies_in_flight(load(d.copies_in_flight));
    copy_engine += dev->copy_engine_bytes_total();
    compute_units += dev->compute_unit_bytes_total();
    copies += dev->copies_total();
  }
  out.set_copy_engine_bytes_total(copy_engine);
  out.set_compute_unit_bytes_total(compute_units);
  out.set_copies_total(copies);
  out.set_bytes_copied_total(copy_engine + compute_units);
  for (std::size_t cls = 0; cls < kTrafficClassCount; ++cls) {
    auto* row = out.add_traffic_classes();
    row->set_traffic_class(kTrafficClassNames[cls]);
    row->set_bytes_total(load(stats.classes[cls].bytes_total));
    row->set_busy_ns_total(load(stats.classes[cls].busy_ns_total));
    row->mutable_queue_delay()->set_size_class(kTrafficClassNames[cls]);
    fill_histogram(stats.classes[cls].queue_delay, *row->mutable_queue_delay());
  }
  for (std::size_t slot = 0; slot < kUserSlots; ++slot) {
    const UserEngineCounters& u = stats.users[slot];
    if (!u.used.load(std::memory_order_acquire)) break;  // slots are given in order
    const bool others = slot == kUserSlots - 1;
    const uint32_t uid = u.uid.load(std::memory_order_relaxed);
    if (!users_shown.all && (others || uid != users_shown.uid)) continue;
    auto* row = out.add_engine_users();
    row->set_user(others ? "other" : uid == kDaemonUid ? "irisd" : std::to_string(uid));
    row->set_bytes_total(load(u.bytes_total));
    row->set_busy_ns_total(load(u.busy_ns_total));
  }
  for (std::size_t op = 0; op < kApiOperationCount; ++op) {
    const ApiOperationCounters& a = stats.api_operations[op];
    if (load(a.calls_total) == 0) continue;
    auto* row = out.add_api_operations();
    row->set_op(kApiOperationNames[op]);
    row->set_calls_total(load(a.calls_total));
    row->set_irisd_bytes_total(load(a.irisd_bytes_total));
    row->set_sm_kernel_bytes_total(load(a.sm_kernel_bytes_total));
    row->set_host_bytes_total(load(a.host_bytes_total));
    row->set_fallback_bytes_total(load(a.fallback_bytes_total));
  }
}

}  // namespace iris::daemon
