#include "daemon/config.hpp"

#include <CLI/CLI.hpp>
#include <iostream>

#include "iris/shared/spsc_ring.hpp"
#include "iris/shared/version.hpp"

namespace iris::daemon {

std::optional<Config> parse_config(int argc, char** argv, int& exit_code) {
  Config c;
  std::string mode = "0660";
  CLI::App app{"irisd: per-node daemon that runs collectives on copy engines"};
  app.set_config("--config", "", "TOML or INI file with the same keys as the long flags");
  app.set_version_flag("--version", std::string("irisd ") + std::string(release_version()) + " (" +
                                        std::string(build_info()) + ")");
  app.add_option("--socket", c.socket_path, "gRPC control socket; the attach socket is PATH.attach")
      ->capture_default_str();
  app.add_option("--socket-mode", mode, "octal mode of both sockets")
      ->check([](const std::string& v) -> std::string {
        std::size_t used = 0;
        unsigned long parsed = 0;
        try {
          parsed = std::stoul(v, &used, 8);
        } catch (const std::exception&) {
          used = 0;
        }
        return used == v.size() && parsed <= 0777 ? ""
                                                  : "'" + v + "' is not an octal mode, like 0660";
      })
      ->capture_default_str();
  app.add_option("--socket-group", c.socket_group, "group owning both sockets");
  app.add_option("--engine", c.engine.kind,
                 "copy engine: auto (hsa if an AMD GPU is usable, else cuda if an NVIDIA GPU is, "
                 "else host) | hsa | cuda | host")
      ->check(CLI::IsMember({"auto", "hsa", "cuda", "host"}))
      ->capture_default_str();
  app.add_option("--engine-workers", c.engine.workers, "host engine: worker threads")
      ->check(CLI::Range(1u, 256u))
      ->capture_default_str();
  app.add_option(
         "--inline-bytes", c.engine.inline_bytes,
         "every engine: a submission's copies between host memory run on the progress thread "
         "while their total stays within this many bytes (a larger one: up to its equal share "
         "beside the engine's workers); the rest go to the engine")
      ->capture_default_str();
  app.add_option("--chunk-bytes", c.engine.chunk_bytes, "host engine: chunk size of large copies")
      ->check(CLI::Range(uint64_t{4096}, uint64_t{1} << 30))
      ->capture_default_str();
  app.add_option("--split-bytes", c.engine.split_bytes,
                 "cuda and hsa engines: copies at least this large are split across the copy "
                 "engines that serve them (0: never)")
      ->capture_default_str();
  std::string queue_bytes = "auto";
  app.add_option(
         "--engine-queue-bytes", queue_bytes,
         "every engine: bytes of copies irisd hands a device's engines at once; the rest "
         "wait in irisd and leave in slices, latency work first, bulk fairly between "
         "users, so a small collective waits behind about that much; only while two "
         "users share the node (auto: 4 MiB on GPU engines, 8 MiB on the host engine; copies "
         "within one GPU, ~30 times faster, 32 times both this and the slice; 0: every copy "
         "straight to the engine, first come first served)")
      ->check([](const std::string& v) -> std::string {
        if (v == "auto") return "";
        try {
          std::size_t used = 0;
          std::stoull(v, &used);
          if (used == v.size()) return "";
        } catch (const std::exception&) {
        }
        return "'" + v + "' is not a byte count or auto";
      })
      ->capture_default_str();
  app.add_option("--engine-slice-bytes", c.pacing.slice_bytes,
                 "every engine: the largest piece of a copy handed over at once")
      ->check(CLI::Range(uint64_t{4096}, uint64_t{1} << 34))
      ->capture_default_str();
  app.add_option("--engine-bulk-every", c.pacing.bulk_every,
                 "while latency and bulk work both wait, bulk gets at least every Nth slice")
      ->check(CLI::Range(1u, 1024u))
      ->capture_default_str();
  app.add_option("--latency-max-bytes", c.pacing.latency_max_bytes,
                 "a collective whose copies are all at most this large is latency work; a "
                 "larger one is bulk")
      ->capture_default_str();
  app.add_option("--latency-uids", c.pacing.latency_uids,
                 "users whose communicators may ask for latency whatever the collective's size "
                 "(others get it up to --latency-max-bytes, bulk beyond)")
      ->delimiter(',');
  app.add_option("--latency-group", c.pacing.latency_group,
                 "members of this group (primary or supplementary) may ask for latency whatever "
                 "the collective's size, as --latency-uids");
  std::vector<std::string> weights;
  app.add_option("--uid-weight", weights,
                 "UID:WEIGHT, repeatable: that user's share of the engines against others' "
                 "(default 1 each)")
      ->check([](const std::string& v) -> std::string {
        const auto colon = v.find(':');
        try {
          std::size_t used = 0;
          if (colon != std::string::npos && std::stoul(v.substr(0, colon), &used) <= UINT32_MAX &&
              used == colon) {
            const unsigned long w = std::stoul(v.substr(colon + 1), &used);
            if (used == v.size() - colon - 1 && w >= 1 && w <= 1000) return "";
          }
        } catch (const std::exception&) {
        }
        return "'" + v + "' is not UID:WEIGHT with a weight from 1 to 1000";
      });
  app.add_option("--copy-timeout-ms", c.engine.copy_timeout_ms,
                 "hsa engine: a copy not finished after this long (plus 1 ms per MiB) fails its "
                 "collective instead of hanging it")
      ->check(CLI::Range(1u, 3'600'000u))
      ->capture_default_str();
  app.add_option("--max-sessions", c.limits.max_sessions, "attached clients at once")
      ->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  app.add_option("--max-sessions-per-uid", c.limits.max_sessions_per_uid,
                 "attached clients of one user at once")
      ->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  app.add_option("--max-buffer-bytes-per-uid", c.limits.max_buffer_bytes_per_uid,
                 "bytes of host buffers all of one user's sessions may hold (a buffer shared "
                 "between sessions counts once in each)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 50))
      ->capture_default_str();
  app.add_option("--handshake-timeout-ms", c.limits.handshake_timeout_ms,
                 "attach connections that have not finished their handshake by then are closed")
      ->check(CLI::Range(10u, 600'000u))
      ->capture_default_str();
  app.add_option("--max-open-files", c.limits.max_open_files,
                 "set the descriptor limit (RLIMIT_NOFILE) at start; 0 keeps the inherited one")
      ->check(CLI::Range(0u, 1u << 24))
      ->capture_default_str();
  app.add_option("--graph-replay-timeout-ms", c.limits.graph_replay_timeout_ms,
                 "a CUDA graph replay waiting this long for a rank that never replays fails its "
                 "captured collective on every rank")
      ->check(CLI::Range(10u, 86'400'000u))
      ->capture_default_str();
  app.add_option("--p2p-timeout-ms", c.limits.p2p_timeout_ms,
                 "a send or receive that its peer has not matched after this long fails with "
                 "timeout")
      ->check(CLI::Range(10u, 86'400'000u))
      ->capture_default_str();
  app.add_option("--resume-window-ms", c.limits.resume_window_ms,
                 "how long clients wait for irisd to come back after it died or stopped (their "
                 "sessions then resume; 0: they fail with daemon_gone at once), and how long a "
                 "resumed communicator waits for its other ranks")
      ->check(CLI::Range(0u, 86'400'000u))
      ->capture_default_str();
  app.add_option("--resume-keep-bytes", c.limits.resume_keep_bytes,
                 "per communicator across nodes: what it keeps of the data it sent another node "
                 "until that node completed the collective, so that the node can resume after its "
                 "irisd restarts (0: nothing kept, and a node that goes away fails them at once)")
      ->check(CLI::Range(uint64_t{0}, uint64_t{1} << 44))
      ->capture_default_str();
  app.add_option("--max-comm-bytes-per-uid", c.limits.max_comm_bytes_per_uid,
                 "irisd memory the communicators of one user may hold (per-rank tables, and what "
                 "ranks resuming after a restart bring back)")
      ->check(CLI::Range(uint64_t{4096}, uint64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--max-attaches-per-uid-per-s", c.limits.max_attaches_per_uid_per_s,
                 "attaches (new or resuming) one user may make per second, and at once; past it "
                 "an attach is refused as busy and the client retries")
      ->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  app.add_option("--max-graph-plans-per-uid", c.limits.max_graph_plans_per_uid,
                 "collectives captured in CUDA graphs that one user's sessions may hold")
      ->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  app.add_option("--operator-group", c.operator_group,
                 "members (and root) see every session and communicator; others their own");
  app.add_option("--max-comms", c.limits.max_comms_per_session,
                 "communicators one session may hold a rank in")
      ->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  app.add_option("--max-buffers", c.limits.max_buffers_per_session, "buffers per session")
      ->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  app.add_option("--max-buffer-bytes", c.limits.max_buffer_bytes, "bytes of one buffer")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 44))
      ->capture_default_str();
  app.add_option("--ring-depth", c.limits.ring_depth,
                 "submission ring entries per session (power of two, 2..65536); also the "
                 "session's limit of requests in flight")
      ->check([](const std::string& v) -> std::string {
        std::size_t used = 0;
        unsigned long long d = 0;
        try {
          d = std::stoull(v, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        return used == v.size() && shm::is_power_of_two(d) && d >= 2 && d <= 65536
                   ? ""
                   : "'" + v + "' is not a power of two from 2 to 65536";
      })
      ->capture_default_str();
  app.add_option("--max-inflight", c.limits.max_inflight, "collectives in flight per communicator")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 32))
      ->capture_default_str();
  app.add_flag("--allow-cross-uid-comms", c.allow_cross_uid_comms,
               "let sessions of different uids join one communicator");
  app.add_flag("--scale-out,!--no-scale-out", c.scale_out,
               "communicators across nodes: UCX to other nodes' irisd daemons (on by default)");
  app.add_option("--scale-out-interface", c.scale_out_interface,
                 "network devices scale-out uses and (TCP) listens on, as UCX_NET_DEVICES names "
                 "them: eth0, mlx5_0:1,...; empty: every device UCX finds");
  app.add_option("--log-level", c.log_level,
                 "trace | debug | info | warn | error; SIGHUP rereads it from --config")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))
      ->capture_default_str();
  app.add_option("--log-format", c.log_format, "text | json (one object per line)")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  app.add_option("--metrics-address", c.metrics_address,
                 "serve Prometheus metrics at http://HOST:PORT/metrics (e.g. 127.0.0.1:9478; "
                 "port 0 picks a free one); off when empty");
  app.add_option("--meeting-address", c.meeting_address,
                 "where ranks of jobs across nodes meet (NCCL's ncclUniqueId carries it): "
                 "HOST:PORT on the address other nodes reach this one at (port 0 picks a free "
                 "one); off when empty")
      ->check([](const std::string& v) -> std::string {
        const std::string host = v.substr(0, v.rfind(':'));
        if (v.empty()) return "";  // off
        if (v.find(':') == std::string::npos || host.empty() || host == "0.0.0.0" ||
            host == "[::]" || host == "::")
          return "'" + v + "' is not HOST:PORT with an address other nodes can reach";
        return "";
      });
  app.add_option("--spin-us", c.spin_us, "progress loop spins this long idle before sleeping")
      ->check(CLI::Range(0u, 1'000'000u))
      ->capture_default_str();
  // A key the config file has and irisd does not know is an error: a typo would otherwise leave
  // a limit at its default without a word.
  app.allow_config_extras(CLI::config_extras_mode::error);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    exit_code = app.exit(e);
    return std::nullopt;
  }
  c.socket_mode = static_cast<mode_t>(std::stoul(mode, nullptr, 8));  // checked above
  c.pacing.queue_bytes = queue_bytes == "auto" ? kEngineQueueBytesAuto : std::stoull(queue_bytes);
  for (const std::string& w : weights) {  // checked above
    const auto colon = w.find(':');
    c.uid_weights[static_cast<uint32_t>(std::stoul(w.substr(0, colon)))] =
        static_cast<uint32_t>(std::stoul(w.substr(colon + 1)));
  }
  return c;
}

}  // namespace iris::daemon
