// Small helpers for integration tests that drive libiris in the test process itself.
#pragma once

#include <functional>
#include <string>

#include "iris/iris.hpp"
#include "tests/support/daemon_process.hpp"

namespace iris::testing {

inline ClientOptions options_for(const DaemonProcess& daemon, std::string name = "iris-test") {
  ClientOptions o;
  o.socket_path = daemon.socket();
  o.client_name = std::move(name);
  return o;
}

// The code of the iris::Error `f` throws; kOk when it throws none.
inline ErrorCode code_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  }
  return ErrorCode::kOk;
}

}  // namespace iris::testing
