// The counters are declared once (daemon/stats.hpp); control.proto's GetStatsResponse must have
// a field of each name and no counter field the daemon does not keep, and GetStats fills them.
#include "daemon/stats.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "daemon/engines/engine.hpp"
#include "daemon/operations/stats_report.hpp"

namespace iris::daemon {
namespace {

// GetStatsResponse's quick-look sums over the labelled families (fill_stats computes them).
const std::set<std::string> kSumsOfFamilies = {
    "collectives_completed_total", "collectives_failed_total", "copies_total",
    "bytes_copied_total",          "copy_engine_bytes_total",  "compute_unit_bytes_total"};

TEST(Stats, CountersMatchTheProto) {
  const auto* descriptor = v1::GetStatsResponse::descriptor();
  std::set<std::string> declared;
  for (const CounterInfo& c : kStatsCounters) {
    const char* name = c.name;
    declared.insert(name);
    const auto* field = descriptor->FindFieldByName(name);
    ASSERT_NE(field, nullptr) << "counter " << name << " has no GetStatsResponse field";
    EXPECT_EQ(field->cpp_type(), google::protobuf::FieldDescriptor::CPPTYPE_UINT64) << name;
  }
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const auto* field = descriptor->field(i);
    if (field->is_repeated()) continue;  // the labelled families
    if (kSumsOfFamilies.count(field->name()) != 0) continue;
    EXPECT_EQ(declared.count(field->name()), 1u)
        << "GetStatsResponse." << field->name() << " is no counter of daemon/stats.hpp";
  }
}

// Each user sees their own engine row; operators every row; a caller irisd does not know none.
TEST(Stats, EngineUsersAreShownToThoseWhoMaySeeThem) {
  Stats stats;
  for (std::size_t slot = 0; slot < kUserSlots; ++slot) {
    stats.users[slot].uid = static_cast<uint32_t>(1000 + slot);
    stats.users[slot].used = true;
    stats.count_engine_work(0, slot, 100 + slot, 7);
  }
  v1::GetStatsResponse all, mine, none, other;
  fill_stats(stats, 0, all);
  ASSERT_EQ(all.engine_users_size(), static_cast<int>(kUserSlots));
  EXPECT_EQ(all.engine_users(0).user(), "1000");
  EXPECT_EQ(all.engine_users(0).bytes_total(), 100u);
  EXPECT_EQ(all.engine_users(0).busy_ns_total(), 7u);
  EXPECT_EQ(all.engine_users(kUserSlots - 1).user(), "other");
  fill_stats(stats, 0, mine, UsersShown{false, 1005});
  ASSERT_EQ(mine.engine_users_size(), 1);
  EXPECT_EQ(mine.engine_users(0).user(), "1005");
  EXPECT_EQ(mine.engine_users(0).bytes_total(), 105u);
  fill_stats(stats, 0, none, UsersShown{false, std::nullopt});
  EXPECT_EQ(none.engine_users_size(), 0);
  // The uid that happens to sit in the shared slot sees nothing of the others' sum.
  fill_stats(stats, 0, other, UsersShown{false, 1000 + kUserSlots - 1});
  EXPECT_EQ(other.engine_users_size(), 0);
}

TEST(Stats, GetStatsCarriesEveryCounterAndTheErrors) {
  Stats stats;
  stats.devices[device_slot(0, kHostMemory)].copy_engine_bytes_total = 123;
  stats.devices[device_slot(kHostMemory, kHostMemory)].compute_unit_bytes_total = 5;
  stats.devices[device_slot(kHostMemory, 1)].copies_in_flight = 2;
  stats.stream_ready_wait_us_total = 7;
  stats.count_error(ErrorCode::kPeerLost);
  stats.count_collective(static_cast<uint32_t>(shm::Opcode::kAllToAll), Outcome::kFailed, 2u << 20,
                         300);
  v1::GetStatsResponse out;
  fill_stats(stats, 2, out);
  EXPECT_EQ(out.copy_engine_bytes_total(), 123u);
  EXPECT_EQ(out.compute_unit_bytes_total(), 5u);
  EXPECT_EQ(out.bytes_copied_total(), 128u);
  EXPECT_EQ(out.stream_ready_wait_us_total(), 7u);
  ASSERT_EQ(out.errors_size(), 1);
  EXPECT_EQ(out.errors(0).code(), "peer_lost");
  EXPECT_EQ(out.errors(0).count(), 1u);
  ASSERT_EQ(out.devices_size(), 3);  // host and two GPUs
  EXPECT_EQ(out.devices(0).device(), "host");
  EXPECT_EQ(out.devices(0).compute_unit_bytes_total(), 5u);
  EXPECT_EQ(out.devices(1).device(), "0");
  EXPECT_EQ(out.devices(1).copy_engine_bytes_total(), 123u);
  EXPECT_EQ(out.devices(2).copies_in_flight(), 2u);
  EXPECT_EQ(out.collectives_failed_total(), 1u);
  ASSERT_EQ(out.collectives_size(), 1);
  EXPECT_EQ(out.collectives(0).op(), "all_to_all");
  EXPECT_EQ(out.collectives(0).outcome(), "failed");
  ASSERT_EQ(out.latency_size(), 1);
  EXPECT_EQ(out.latency(0).size_class(), "1MiB-16MiB");
  EXPECT_EQ(out.latency(0).sum_us(), 300u);
  ASSERT_EQ(out.latency(0).bucket_counts_size(), out.latency(0).upper_bound_us_size() + 1);
  // 300 us falls in the bucket bounded by 500 us.
  for (int b = 0; b < out.latency(0).bucket_counts_size(); ++b)
    EXPECT_EQ(out.latency(0).bucket_counts(b),
              b < out.latency(0).upper_bound_us_size() && out.latency(0).upper_bound_us(b) == 500
                  ? 1u
                  : 0u)
        << "bucket " << b;
}

TEST(Stats, ACopyCountsForTheGpuItLandsOnElseTheOneItLeaves) {
  EXPECT_EQ(device_slot(kHostMemory, kHostMemory), 0u);
  EXPECT_EQ(device_slot(3, kHostMemory), 4u);
  EXPECT_EQ(device_slot(kHostMemory, 2), 3u);
  EXPECT_EQ(device_slot(1, 2), 3u);
  EXPECT_EQ(device_slot(1000, kHostMemory), kDeviceSlots - 1);  // clamped, never out of bounds
}

}  // namespace
}  // namespace iris::daemon
