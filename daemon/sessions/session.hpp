// One attached client: who it is (from SO_PEERCRED), its segment (ring and completion slots),
// its buffers and the communicators it holds a rank in.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "daemon/engines/engine.hpp"
#include "daemon/sessions/mapped_buffer.hpp"
#include "iris/shared/segment_layout.hpp"
#include "iris/shared/shm_segment.hpp"
#include "iris/shared/unix_socket.hpp"

namespace iris::daemon {

class Session {
 public:
  // `resumed`: a client of a previous irisd brought the segment back (SessionRegistry::create).
  Session(uint64_t id, net::PeerCredentials peer, std::string client_name, shm::ShmSegment segment,
          const shm::SegmentLayout& layout, net::Fd wake_fd, net::Fd connection, bool resumed);
  ~Session();

  uint64_t id() const { return id_; }
  const net::PeerCredentials& peer() const { return peer_; }
  const std::string& client_name() const { return client_name_; }
  // The segment's memfd, once, to send to the client.
  net::Fd take_segment_fd() { return segment_.take_fd(); }
  std::chrono::steady_clock::time_point attached_at() const { return attached_at_; }
  int wake_fd() const { return wake_fd_.get(); }
  uint32_t ring_depth() const { return view_.ring_depth; }
  // Whether this session continues one of a previous irisd: only such a session may name the ids
  // of its buffers (those the previous irisd gave them) or resume communicators and graph plans.
  bool resumed() const { return resumed_; }
  // Whether the client has its attach answer: until then nothing reads the ring, so that nothing
  // the client writes there can end the session before the client hears it was attached.
  bool serving() const { return serving_; }
  void start_serving() { serving_ = true; }

  shm::RingConsumer<shm::SubmitEntry>& ring() { return ring_; }
  bool ring_has_entries() const { return ring_.has_entries(); }

  // Writes a completion into the client's slot (the Completer writes the rest of a request's
  // end); the wake happens in flush_wake(). `why`, for a failure, goes into the slot's failure
  // text first. True for the first completion since the last wake.
  bool complete(uint32_t slot, uint32_t generation, ErrorCode code, const std::string& why);
  // Whether the client's GPU stream has reached a stream-ordered request (flags[slot].ready).
  bool stream_ready(uint32_t slot, uint32_t generation) const;
  // Graph plans: whether a replay wrote the plan's ready flag (1); the flag cleared as a replay
  // completes (before its done flag is written: the graph writes 1 again only after that); and
  // the plan slot's flag and completion cleared for a new plan.
  bool plan_ready(uint32_t plan_slot) const;
  void clear_plan_ready(uint32_t plan_slot);
  void reset_plan_flags(uint32_t plan_slot);
  // Bumps the completion epoch and wakes sleeping client threads, once per progress iteration.
  void flush_wake();
  void set_daemon_needs_wakeup(bool value);
  // Tells the client's waits the daemon is gone (clean shutdown).
  void mark_daemon_stopped();
  // The daemon ends this session (not a shutdown): the client must not resume it.
  void mark_session_ended();
  // What the client counted as refused before submission (its own word: only shown).
  uint64_t client_rejections() const {
    return view_.header->client_rejections.load(std::memory_order_relaxed);
  }

  // Buffer ids name buffers within this session only: no session's ids can move another's.
  std::unordered_map<uint64_t, std::shared_ptr<MappedBuffer>> buffers;
  uint64_t next_buffer_id = 1;
  // The registered buffer `id`, or null.
  std::shared_ptr<MappedBuffer> buffer(uint64_t id) const {
    auto it = buffers.find(id);
    return it == buffers.end() ? nullptr : it->second;
  }
  uint64_t buffer_bytes = 0;                // every registered buffer
  uint64_t host_buffer_bytes = 0;           // those irisd allocated in host memory
  std::map<uint64_t, uint32_t> comm_ranks;  // comm id -> this session's rank
  // GPU memory where this session's streams wait for done flags (ring depth + graph plan slots,
  // a uint32 each), once the client registered it; the Completer writes a request's flag there
  // with its completion slot.
  std::optional<ImportedMemory> device_done_flags;
  uint64_t submitted = 0;
  // Requests popped and not yet completed: at most the ring depth (a client reusing slots to
  // pile up work gets limit_exceeded).
  uint32_t pending = 0;

 private:
  uint64_t id_;
  net::PeerCredentials peer_;
  std::string client_name_;
  std::chrono::steady_clock::time_point attached_at_;
  shm::ShmSegment segment_;
  shm::SegmentView view_;
  shm::RingConsumer<shm::SubmitEntry> ring_;
  net::Fd wake_fd_;
  net::Fd connection_;  // a duplicate of the attach connection, shut down when the session ends
  bool needs_wake_ = false;
  bool resumed_;
  bool serving_ = false;
};

}  // namespace iris::daemon
