// Small helpers for integration tests that drive libiris in the test process itself.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>

#include "iris/iris.hpp"
#include "tests/support/code_of.hpp"
#include "tests/support/daemon_process.hpp"

namespace iris::testing {

inline ClientOptions options_for(const DaemonProcess& daemon, std::string name = "iris-test") {
  ClientOptions o;
  o.socket_path = daemon.socket();
  o.client_name = std::move(name);
  return o;
}

// Two clients of this process as ranks 0 and 1 of the two-rank communicator `key`, each with a
// send buffer of `bytes` and a receive buffer of twice that.
struct TwoRanks {
  TwoRanks(const DaemonProcess& daemon, const std::string& key, std::size_t bytes)
      : a(Client::connect(options_for(daemon, key + "-a"))),
        b(Client::connect(options_for(daemon, key + "-b"))),
        ca(Communicator::init(a, key, 2, 0)),
        cb(Communicator::init(b, key, 2, 1)),
        sa(a.allocate(bytes)),
        ra(a.allocate(2 * bytes)),
        sb(b.allocate(bytes)),
        rb(b.allocate(2 * bytes)) {}

  Client a, b;
  Communicator ca, cb;
  Buffer sa, ra, sb, rb;
};

// Polls `done` until it holds; false once `limit` passed (a bound against hanging, not a
// timing: tests assert on the result, never on how long it took).
inline bool eventually(const std::function<bool()>& done,
                       std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// How `r` ended within `limit`: its code and message (kOk and ""; kTimeout and "still waiting"
// when it did not end in time).
struct Ending {
  ErrorCode code;
  std::string why;
};
inline Ending ending_of(Request& r, std::chrono::nanoseconds limit) {
  try {
    if (!r.wait(limit)) return {ErrorCode::kTimeout, "still waiting"};
  } catch (const Error& e) {
    return {e.code(), e.what()};
  }
  return {ErrorCode::kOk, ""};
}

// How many times `needle` occurs in `log` (a daemon log, say).
inline std::size_t count_lines_with(const std::string& log, const std::string& needle) {
  std::size_t n = 0;
  for (std::size_t at = log.find(needle); at != std::string::npos; at = log.find(needle, at + 1))
    ++n;
  return n;
}

// An honest two-rank all-gather on its own communicator, start to finish.
inline void honest_pair_gathers(const DaemonProcess& daemon, const std::string& key) {
  TwoRanks pair(daemon, key, 4096);
  auto& [a, b, ca, cb, sa, ra, sb, rb] = pair;
  std::memset(sa.data(), 0x11, 4096);
  std::memset(sb.data(), 0x22, 4096);
  auto x = ca.all_gather(sa.data(), ra.data(), 4096);
  auto y = cb.all_gather(sb.data(), rb.data(), 4096);
  EXPECT_EQ(code_of([&] { x.wait(); }), ErrorCode::kOk);
  EXPECT_EQ(code_of([&] { y.wait(); }), ErrorCode::kOk);
  EXPECT_EQ(ra.as<unsigned char>()[4096], 0x22);
}

}  // namespace iris::testing
