#include "client/ctl/commands/stats_command.hpp"

namespace iris::ctl {

Report StatsCommand::run(const client::ControlChannel& channel) const {
  const auto s = channel.call(&v1::Control::Stub::GetStats, v1::GetStatsRequest{}, "stats");
  Report report;
  auto& counters = report.fields("stats");
  // Every counter field of the answer, in control.proto's order: a counter irisd adds shows here
  // without a change to iris-ctl.
  const auto* descriptor = s.GetDescriptor();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const auto* field = descriptor->field(i);
    if (field->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_UINT64 ||
        field->is_repeated())
      continue;
    counters.fields.push_back({field->name(), s.GetReflection()->GetUInt64(s, field)});
  }
  auto& errors = report.table("errors", {"code", "count"});
  for (const auto& e : s.errors()) errors.rows.push_back({e.code(), e.count()});
  return report;
}

}  // namespace iris::ctl
