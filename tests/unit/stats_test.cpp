// The counters are declared once (daemon/stats.hpp); control.proto's GetStatsResponse must have
// a field of each name and no counter field the daemon does not keep, and GetStats fills them.
#include "daemon/stats.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "daemon/front/reports.hpp"

namespace iris::daemon {
namespace {

TEST(Stats, CountersMatchTheProto) {
  const auto* descriptor = v1::GetStatsResponse::descriptor();
  std::set<std::string> declared;
  for (const char* name : kStatsCounterNames) {
    declared.insert(name);
    const auto* field = descriptor->FindFieldByName(name);
    ASSERT_NE(field, nullptr) << "counter " << name << " has no GetStatsResponse field";
    EXPECT_EQ(field->cpp_type(), google::protobuf::FieldDescriptor::CPPTYPE_UINT64) << name;
  }
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const auto* field = descriptor->field(i);
    if (field->is_repeated()) continue;  // errors by code
    EXPECT_EQ(declared.count(field->name()), 1u)
        << "GetStatsResponse." << field->name() << " is no counter of daemon/stats.hpp";
  }
}

TEST(Stats, GetStatsCarriesEveryCounterAndTheErrors) {
  Stats stats;
  stats.copy_engine_bytes_total = 123;
  stats.stream_ready_wait_us_total = 7;
  stats.count_error(ErrorCode::kPeerLost);
  v1::GetStatsResponse out;
  fill_stats(stats, out);
  EXPECT_EQ(out.copy_engine_bytes_total(), 123u);
  EXPECT_EQ(out.stream_ready_wait_us_total(), 7u);
  ASSERT_EQ(out.errors_size(), 1);
  EXPECT_EQ(out.errors(0).code(), "peer_lost");
  EXPECT_EQ(out.errors(0).count(), 1u);
}

}  // namespace
}  // namespace iris::daemon
