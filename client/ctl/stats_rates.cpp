#include "client/ctl/stats_rates.hpp"

namespace iris::ctl {

namespace {
constexpr std::string_view kTotal = "_total";

double per_second(uint64_t before, uint64_t after, double seconds) {
  // A restarted daemon counts from zero again: no negative rate.
  return seconds > 0 && after >= before ? static_cast<double>(after - before) / seconds : 0.0;
}

// The row of `rows` whose `key` is `row`'s (null: the row is new since the earlier answer).
template <typename Rows, typename Row, typename Key>
const Row* earlier(const Rows& rows, const Row& row, Key key) {
  for (const Row& r : rows)
    if ((r.*key)() == (row.*key)()) return &r;
  return nullptr;
}
}  // namespace

std::vector<Rate> counter_rates(const v1::GetStatsResponse& before,
                                const v1::GetStatsResponse& after, double seconds) {
  std::vector<Rate> rates;
  const auto* descriptor = after.GetDescriptor();
  const auto* reflection = after.GetReflection();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const auto* field = descriptor->field(i);
    const std::string& name = field->name();
    if (field->is_repeated() ||
        field->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_UINT64 ||
        !name.ends_with(kTotal))
      continue;
    rates.push_back({name.substr(0, name.size() - kTotal.size()) + "_per_s",
                     per_second(reflection->GetUInt64(before, field),
                                reflection->GetUInt64(after, field), seconds)});
  }
  return rates;
}

std::vector<DeviceRate> device_rates(const v1::GetStatsResponse& before,
                                     const v1::GetStatsResponse& after, double seconds) {
  std::vector<DeviceRate> rates;
  for (const auto& d : after.devices()) {
    const v1::DeviceCounters* was = earlier(before.devices(), d, &v1::DeviceCounters::device);
    rates.push_back(
        {d.device(),
         per_second(was ? was->copy_engine_bytes_total() : 0, d.copy_engine_bytes_total(), seconds),
         per_second(was ? was->compute_unit_bytes_total() : 0, d.compute_unit_bytes_total(),
                    seconds),
         d.copies_in_flight()});
  }
  return rates;
}

std::vector<UserRate> user_rates(const v1::GetStatsResponse& before,
                                 const v1::GetStatsResponse& after, double seconds) {
  std::vector<UserRate> rates;
  for (const auto& u : after.engine_users()) {
    const v1::UserEngineCounters* was =
        earlier(before.engine_users(), u, &v1::UserEngineCounters::user);
    rates.push_back({u.user(), per_second(was ? was->bytes_total() : 0, u.bytes_total(), seconds),
                     per_second(was ? was->busy_ns_total() : 0, u.busy_ns_total(), seconds) / 1e9});
  }
  return rates;
}

}  // namespace iris::ctl
