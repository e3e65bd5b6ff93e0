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
  // `resume_id`: a resuming session's id for it from the previous irisd (0: a new one).
  RegisteredBuffer register_device(Session& s, const DeviceBufferExport& exported,
                                   uint64_t resume_id = 0);
  // Resuming: host memory the previous irisd allocated for `s`, its memfd sent back by the client,
  // registered again as buffer `id` (the limits apply as to a new buffer).
  void adopt_host(Session& s, uint64_t id, uint64_t bytes, net::Fd memfd);
  // Host memory the client holds as a memfd sealed against shrinking (another session's buffer,
  // typically), registered for `s` under a new id (the limits apply as to a new buffer).
  RegisteredBuffer share_host(Session& s, uint64_t bytes, net::Fd memfd);
  // GPU memory where the session's streams wait for done flags (ring depth x uint32).
  void register_done_flags(Session& s, const DeviceBufferExport& exported);
  void deregister(Session& s, uint64_t buffer_id);
  // Every buffer of a session that ends. Copies in flight keep their mappings (shared_ptr).
  void release_all(Session& s);

 private:
  void check_limits(const Session& s, uint64_t bytes) const;
  void check_host_limits(const Session& s, uint64_t bytes) const;
  // The id a buffer gets: `resume_id` when the session is resuming (checked: free in this session;
  // kPermissionDenied in a session that is not resuming), else the session's next free one. Ids
  // are the session's own: no call of one session can change which ids another gets.
  uint64_t take_id(const Session& s, uint64_t resume_id) const;
  // Host memory mapped for `s` and pinned by the engine as buffer `id`.
  RegisteredBuffer add_host(Session& s, uint64_t id, shm::ShmSegment segment, uint64_t bytes);
  // The client's sealed memfd mapped (refused unless sealed against shrinking and holding
  // `bytes`) and added as host buffer `id`; `what` names the call in the errors.
  RegisteredBuffer add_client_memfd(Session& s, uint64_t id, uint64_t bytes, net::Fd memfd,
                                    const std::string& what);
  RegisteredBuffer add(Session& s, std::shared_ptr<MappedBuffer> buffer, net::Fd memfd);
  void forget(Session& s, const MappedBuffer& buffer);

  const Config& config_;
  Engine& engine_;
  Stats& stats_;
  const SessionRegistry& sessions_;
};

}  // namespace iris::daemon
