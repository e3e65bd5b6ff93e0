// The ErrorCode of the iris::Error a call throws (kOk when it throws none), for tests that assert
// on what was refused and why.
#pragma once

#include <functional>
#include <optional>

#include "iris/error.hpp"

namespace iris::testing {

inline ErrorCode code_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  }
  return ErrorCode::kOk;
}

// The iris::Error a call throws, whole (its message too); nullopt when it throws none.
inline std::optional<Error> error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  return std::nullopt;
}

}  // namespace iris::testing
