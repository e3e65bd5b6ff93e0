// Sessions' buffers: host memory irisd creates and shares with the client, GPU memory the
// client exported (IPC handle or VMM descriptors), and a session's stream done flags. The
// per-session limits and the registered-buffer counters are kept here, in one place.
#pragma once

#include <memory>
#include <string>

#include "daemon/config.hpp"
#include "daemon/engines/engine.hpp"
#include "daemon/sessions/session_registry.hpp"
#include "daemon/stats.hpp"

namespace iris::daemon {

struct RegisteredBuffer {
  uint64_t id;
  uint64_t bytes;
  net::Fd memfd;  // host buffers: the sealed memfd the client maps; empty for GPU memory
};

class BufferRegistry {
 public:
  BufferRegistry(const Config& config, Engine& engine, Stats& stats,
                 const SessionRegistry& sessions);

  // Each throws iris::Error naming the limit or the problem.
  RegisteredBuffer register_host(Session& s, uint64_t bytes);
  RegisteredBuffer register_device(Session& s, const DeviceBufferExport& exported);
  // GPU memory where the session's streams wait for done flags (ring depth x uint32).
  void register_done_flags(Session& s, const DeviceBufferExport& exported);
  void deregister(Session& s, uint64_t buffer_id);
  // Every buffer of a session that ends. Copies in flight keep their mappings (shared_ptr).
  void release_all(Session& s);

 private:
  void check_limits(const Session& s, uint64_t bytes) const;
  RegisteredBuffer add(Session& s, std::shared_ptr<MappedBuffer> buffer, net::Fd memfd);
  void forget(Session& s, const MappedBuffer& buffer);

  const Config& config_;
  Engine& engine_;
  Stats& stats_;
  const SessionRegistry& sessions_;
  uint64_t next_id_ = 1;
};

}  // namespace iris::daemon
