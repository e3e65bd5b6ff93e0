// irisd's settings: command-line flags, optionally read from a TOML/INI config file
// (`--config FILE`; flags given on the command line win).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "daemon/engines/copy_dispatcher.hpp"
#include "daemon/engines/engine.hpp"

namespace iris::daemon {

struct Limits {
  uint32_t max_sessions = 256;
  uint32_t max_sessions_per_uid = 64;  // one user cannot take every session
  uint32_t max_buffers_per_session = 1024;
  uint32_t max_comms_per_session = 1024;  // communicators one session may hold a rank in
  // irisd memory the communicators of one user may hold (their per-rank tables, and what resuming
  // ranks bring back): a user's many or huge communicators cannot take the node's memory.
  uint64_t max_comm_bytes_per_uid = 64ull << 20;
  // Attaches (new or resuming) one user may make per second, and as a burst: a user attaching in
  // a loop is refused (busy) instead of taking the progress thread from everyone else.
  uint32_t max_attaches_per_uid_per_s = 200;
  uint64_t max_buffer_bytes = 16ull << 30;           // one registered buffer
  uint64_t max_buffer_bytes_per_uid = 256ull << 30;  // host buffers of all of a uid's sessions
  uint32_t ring_depth = 256;  // per session; also its limit of requests in flight
  // Collectives in flight per communicator: a tenant's backlog fails its own collectives, never
  // another communicator's.
  uint64_t max_inflight = 4096;
  // Attach connections that have not finished their handshake by then are closed.
  uint32_t handshake_timeout_ms = 5000;
  // The process's descriptor limit (RLIMIT_NOFILE), set at start when not 0 (systemd's
  // LimitNOFILE does the same for the service).
  uint32_t max_open_files = 0;
  // A graph replay waiting this long for a rank that never replays fails its graph collective
  // on every rank (the graphs' waits end; the host sees timeout).
  uint32_t graph_replay_timeout_ms = 60000;
  // Collectives captured in CUDA graphs that all of one user's sessions may hold (the progress
  // loop looks at each one's ready flag every pass).
  uint32_t max_graph_plans_per_uid = 1024;
  // A send or receive its peer has not matched after this long fails with timeout (the caller's
  // wait ends; nothing is held for a peer that never comes).
  uint32_t p2p_timeout_ms = 300000;
  // How long clients wait for irisd to come back after it died or stopped, unless they say
  // otherwise (told to them at attach; 0: they fail with daemon_gone at once); also how long a
  // communicator resumed after a restart waits for its other ranks before it fails as peer_lost.
  uint32_t resume_window_ms = 60000;
  // Communicators across nodes, with a resume window: what one keeps of the data it sent another
  // node until that node's ranks completed the collective (what that node needs again should its
  // irisd restart). 0: nothing kept, and a node that goes away fails them at once.
  uint64_t resume_keep_bytes = 4ull << 30;
};

struct Config {
  std::string socket_path = "/run/irisd/irisd.sock";
  mode_t socket_mode = 0660;
  std::string socket_group;  // empty: the daemon's own group
  EngineOptions engine;
  // How irisd shares the engines between tenants (engines/copy_dispatcher.hpp, fair_share.hpp).
  Pacing pacing;
  std::map<uint32_t, uint32_t> uid_weights;  // uid -> share of the engines (default 1)
  Limits limits;
  bool allow_cross_uid_comms = false;
  // Communicators across nodes (UCX to other nodes' irisd daemons, started on first use).
  bool scale_out = true;
  // The network devices scale-out may use (UCX_NET_DEVICES: "eth0", "mlx5_0:1,mlx5_1:1"); with
  // UCX's TCP transport this is also where irisd listens. Empty: UCX's choice (every device).
  std::string scale_out_interface;
  // Members of this group (and root) see every session and communicator in iris-ctl; other
  // users see their own. Empty: root only.
  std::string operator_group;
  std::string log_level = "info";   // SIGHUP rereads it from the config file
  std::string log_format = "text";  // text | json
  // Prometheus /metrics on HOST:PORT (port 0: any free one, iris-ctl status shows it); empty: off.
  std::string metrics_address;
  // The meeting point for jobs across nodes on HOST:PORT (port 0: any free one; once started,
  // the bound address); empty: off. See front/meeting_point.hpp.
  std::string meeting_address;
  uint32_t spin_us = 1000;  // progress loop: polling this long with no work before it sleeps

  // The attach socket (plain, SO_PEERCRED) lives beside the gRPC one.
  std::string attach_socket_path() const { return socket_path + ".attach"; }
  std::string lock_path() const { return socket_path + ".lock"; }
};

// Parses argv. On --help or an error, returns nullopt and sets `exit_code` (0 for --help) after
// printing the message.
std::optional<Config> parse_config(int argc, char** argv, int& exit_code);

}  // namespace iris::daemon
