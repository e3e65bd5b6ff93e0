// The daemon's data-path state and the operations on it: sessions, buffers, communicators, the
// collective scheduler and the engine. Everything here runs on the progress thread (see
// ProgressLoop), so none of it is locked.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon/collectives/collective_scheduler.hpp"
#include "daemon/config.hpp"
#include "daemon/progress_loop.hpp"
#include "daemon/session.hpp"
#include "iris/error.hpp"
#include "iris/v1/control.pb.h"

namespace iris::daemon {

struct AttachResult {
  uint64_t session_id;
  std::string token;
  std::string segment_name;
  uint32_t ring_depth;
  int wake_fd;  // the session keeps it; the listener sends a duplicate to the client
};

class Runtime final : public LoopWork {
 public:
  static constexpr uint32_t kMaxRanks = 4096;

  Runtime(const Config& config, Engine& engine, Stats& stats, ProgressLoop& loop);
  ~Runtime() override;

  // Sessions. Throw iris::Error with a code and an operator-facing message.
  // `connection` is the attach connection; the session keeps a duplicate to close it at its end.
  AttachResult attach(const net::PeerCredentials& peer, const std::string& client_name,
                      int connection);
  // Ends a session: `lost` when its connection dropped without Detach. Unknown ids are ignored.
  void end_session(uint64_t session_id, bool lost);
  uint64_t session_for_token(const std::string& token) const;

  v1::RegisterBufferResponse register_buffer(uint64_t session_id, uint64_t bytes);
  v1::RegisterBufferResponse register_device_buffer(uint64_t session_id,
                                                    const DeviceBufferExport& exported);
  // The session's stream done flags in GPU memory (see Session::device_done_flags).
  void register_device_done_flags(uint64_t session_id, const DeviceBufferExport& exported);
  void deregister_buffer(uint64_t session_id, uint64_t buffer_id);
  uint64_t comm_init(uint64_t session_id, const std::string& key, uint32_t nranks, uint32_t rank);
  void comm_destroy(uint64_t session_id, uint64_t comm_id);

  void fill_sessions(v1::ListSessionsResponse& out) const;
  void fill_comms(v1::ListCommsResponse& out) const;
  // Immutable after start: safe to read from any thread.
  const EngineDescription& engine_description() const { return engine_.description(); }
  std::size_t session_count() const { return sessions_.size(); }
  std::size_t comm_count() const { return comms_.size(); }

  // Clean shutdown: tell every client the daemon is gone.
  void mark_all_stopped();

  bool poll_once() override;
  void set_sleeping(bool sleeping) override;
  bool has_ready_work() override;

 private:
  Session& session(uint64_t id) const;
  void handle_entry(Session& s, const shm::SubmitEntry& e);
  void handle_collective(Session& s, const shm::SubmitEntry& e);
  // Stream-ordered arrivals whose GPU stream has now reached the call go to the scheduler.
  bool start_ready_stream_arrivals();
  void complete(const CompletionTarget& target, ErrorCode code);
  void leave_comm(Session& s, uint64_t comm_id, ErrorCode reason_for_others);
  void remove_comm_if_unused(uint64_t comm_id);
  std::string new_token();
  void check_buffer_limits(const Session& s, uint64_t bytes) const;
  void add_buffer(Session& s, std::shared_ptr<MappedBuffer> buffer);
  std::string session_shm_name(uint64_t session_id) const;
  std::string buffer_shm_name(uint64_t session_id, uint64_t buffer_id) const;

  const Config& config_;
  Engine& engine_;
  Stats& stats_;
  ProgressLoop& loop_;
  CollectiveScheduler scheduler_;
  shm::SegmentLayout layout_;

  std::unordered_map<uint64_t, std::unique_ptr<Session>> sessions_;
  std::vector<Session*> session_list_;  // iteration order for polling
  std::unordered_map<std::string, uint64_t> session_by_token_;
  std::unordered_map<uint64_t, std::unique_ptr<Communicator>> comms_;
  std::unordered_map<std::string, uint64_t> comm_by_key_;  // communicators still accepting ranks
  std::vector<uint64_t> sessions_to_end_;                  // found corrupt while polling
  // A validated stream-ordered request, waiting for its rank's GPU stream to reach the call.
  struct AwaitingStream {
    CompletionTarget target;
    uint64_t comm_id;
    uint32_t rank;
    uint64_t seq;
    ValidatedRequest request;
    std::chrono::steady_clock::time_point seen;  // when its ring entry was popped
  };
  std::vector<AwaitingStream> awaiting_stream_;
  std::vector<CopyCompletion> completions_;
  std::vector<uint64_t> emptied_comms_;  // no members left, copies still in flight
  uint64_t next_session_id_ = 1;
  uint64_t next_buffer_id_ = 1;
  uint64_t next_comm_id_ = 1;
};

}  // namespace iris::daemon
