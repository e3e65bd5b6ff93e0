// irisd's settings: command-line flags, optionally read from a TOML/INI config file
// (`--config FILE`; flags given on the command line win).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "daemon/engines/engine.hpp"

namespace iris::daemon {

struct Limits {
  uint32_t max_sessions = 256;
  uint32_t max_buffers_per_session = 1024;
  uint64_t max_buffer_bytes = 16ull << 30;  // one registered buffer
  uint32_t ring_depth = 256;                // per session; also its in-flight request limit
  uint64_t max_inflight = 65536;            // collectives in flight, daemon-wide
};

struct Config {
  std::string socket_path = "/run/irisd/irisd.sock";
  mode_t socket_mode = 0660;
  std::string socket_group;  // empty: the daemon's own group
  EngineOptions engine;
  Limits limits;
  bool allow_cross_uid_comms = false;
  std::string log_level = "info";
  uint32_t spin_us = 1000;  // progress loop: polling this long with no work before it sleeps

  // The attach socket (plain, SO_PEERCRED) lives beside the gRPC one.
  std::string attach_socket_path() const { return socket_path + ".attach"; }
  std::string lock_path() const { return socket_path + ".lock"; }
  // Prefix of every shared-memory name this daemon creates (shm::segment_prefix).
  std::string shm_prefix() const;
};

// Parses argv. On --help or an error, returns nullopt and sets `exit_code` (0 for --help) after
// printing the message.
std::optional<Config> parse_config(int argc, char** argv, int& exit_code);

}  // namespace iris::daemon
