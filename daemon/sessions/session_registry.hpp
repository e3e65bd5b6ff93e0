// The attached sessions: creation (segment, wake eventfd), lookup, removal, and the per-uid
// quota. Runs on the progress thread only.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon/config.hpp"
#include "daemon/sessions/session.hpp"
#include "iris/shared/segment_layout.hpp"

namespace iris::daemon {

class SessionRegistry {
 public:
  explicit SessionRegistry(const Config& config);

  // A new session for the peer on attach connection `connection` (the session keeps a
  // duplicate, shut down when it ends). Throws iris::Error: kLimitExceeded naming the limit
  // (max_sessions, or max_sessions_per_uid for this uid), kInternal.
  // `resumed`: the segment a client of a previous irisd sent back to resume its session (checked:
  // a memfd sealed against shrinking, of this irisd's layout and ring depth; kProtocolMismatch
  // naming what differs), instead of a new one.
  Session& create(const net::PeerCredentials& peer, const std::string& client_name, int connection,
                  net::Fd resumed = net::Fd());
  // Forgets the session and destroys it (its segment goes with it).
  void remove(uint64_t id);

  Session* find(uint64_t id) const;
  // Throws kNotFound naming the session.
  Session& get(uint64_t id) const;
  // Host-buffer bytes the sessions of `uid` hold now (for max_buffer_bytes_per_uid).
  uint64_t host_buffer_bytes_of_uid(uid_t uid) const;

  // In attach order, for polling and reports.
  const std::vector<Session*>& list() const { return list_; }
  std::size_t size() const { return sessions_.size(); }
  // Distinct uids with a session attached.
  std::size_t users() const { return sessions_of_uid_.size(); }
  bool empty() const { return sessions_.empty(); }
  const shm::SegmentLayout& layout() const { return layout_; }

 private:
  const Config& config_;
  shm::SegmentLayout layout_;
  std::unordered_map<uint64_t, std::unique_ptr<Session>> sessions_;
  std::vector<Session*> list_;
  std::unordered_map<uid_t, uint32_t> sessions_of_uid_;
  uint64_t next_id_ = 1;
};

}  // namespace iris::daemon
