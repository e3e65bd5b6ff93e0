// Rates between two GetStats answers, for the commands that watch irisd (stats --watch, top).
#pragma once

#include <string>
#include <vector>

#include "iris/v1/control.pb.h"

namespace iris::ctl {

struct Rate {
  std::string name;  // the counter, "_total" replaced by "_per_s"
  double per_second;
};

// Every counter field (name ending in _total) of the answers, per second over `seconds`.
std::vector<Rate> counter_rates(const v1::GetStatsResponse& before,
                                const v1::GetStatsResponse& after, double seconds);

struct DeviceRate {
  std::string device;
  double copy_engine_bytes_per_s;
  double compute_unit_bytes_per_s;
  uint64_t copies_in_flight;  // now
};
std::vector<DeviceRate> device_rates(const v1::GetStatsResponse& before,
                                     const v1::GetStatsResponse& after, double seconds);

struct UserRate {
  std::string user;  // a uid, "irisd" or "other" (control.proto's UserEngineCounters)
  double engine_bytes_per_s;
  double engine_busy;  // engine time per second of the interval (summed over devices)
};
std::vector<UserRate> user_rates(const v1::GetStatsResponse& before,
                                 const v1::GetStatsResponse& after, double seconds);

}  // namespace iris::ctl
