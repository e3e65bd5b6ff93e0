// The attached sessions: creation (segment, wake eventfd, token), lookup by id and by token,
// and removal. Runs on the progress thread only.
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
  // duplicate, shut down when it ends). Throws iris::Error (kLimitExceeded, kInternal).
  Session& create(const net::PeerCredentials& peer, const std::string& client_name, int connection);
  // Forgets the session and destroys it (its segment goes with it).
  void remove(uint64_t id);

  Session* find(uint64_t id) const;
  // Throws kNotFound naming the session.
  Session& get(uint64_t id) const;
  // Throws kNotFound when no session has this token.
  uint64_t id_for_token(const std::string& token) const;

  // In attach order, for polling and reports.
  const std::vector<Session*>& list() const { return list_; }
  std::size_t size() const { return sessions_.size(); }
  bool empty() const { return sessions_.empty(); }
  const shm::SegmentLayout& layout() const { return layout_; }
  // /dev/shm names of a session's segment and of its host buffers.
  std::string segment_name(uint64_t session_id) const;
  std::string buffer_name(uint64_t session_id, uint64_t buffer_id) const;

 private:
  const Config& config_;
  shm::SegmentLayout layout_;
  std::unordered_map<uint64_t, std::unique_ptr<Session>> sessions_;
  std::vector<Session*> list_;
  std::unordered_map<std::string, uint64_t> by_token_;
  uint64_t next_id_ = 1;
};

}  // namespace iris::daemon
