#include "daemon/sessions/session_registry.hpp"

#include <fcntl.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "iris/error.hpp"
#include "iris/shared/version.hpp"

namespace iris::daemon {

SessionRegistry::SessionRegistry(const Config& config)
    : config_(config), layout_(*shm::SegmentLayout::for_depth(config.limits.ring_depth)) {}

Session& SessionRegistry::create(const net::PeerCredentials& peer, const std::string& client_name,
                                 int connection, net::Fd resumed) {
  if (sessions_.size() >= config_.limits.max_sessions)
    throw Error(ErrorCode::kLimitExceeded,
                "irisd already has " + std::to_string(sessions_.size()) +
                    " sessions (max_sessions); detach idle clients or raise --max-sessions");
  uint32_t& of_uid = sessions_of_uid_[peer.uid];
  if (of_uid >= config_.limits.max_sessions_per_uid)
    throw Error(ErrorCode::kLimitExceeded,
                "uid " + std::to_string(peer.uid) + " already has " + std::to_string(of_uid) +
                    " sessions (max_sessions_per_uid); detach idle clients of this user or ask "
                    "the operator to raise --max-sessions-per-uid");
  const uint64_t id = next_id_++;
  shm::ShmSegment segment;
  const bool resuming = static_cast<bool>(resumed);
  if (resuming) {
    try {
      segment = shm::ShmSegment::map(std::move(resumed), layout_.total_bytes);
    } catch (const std::exception& e) {
      throw Error(ErrorCode::kProtocolMismatch,
                  std::string("cannot resume: the session segment sent back: ") + e.what());
    }
    if (!shm::adopt_segment(segment.data(), segment.size(), layout_, id))
      throw Error(ErrorCode::kProtocolMismatch,
                  "cannot resume: the session segment sent back is not of this irisd's layout "
                  "(segment version " +
                      std::to_string(kSegmentVersion) + ", ring depth " +
                      std::to_string(layout_.ring_depth) +
                      "); the previous irisd was another version or had another --ring-depth");
  } else {
    segment = shm::ShmSegment::create("irisd-session-" + std::to_string(id), layout_.total_bytes);
    shm::initialize_segment(segment.data(), layout_, id);
  }
  net::Fd wake(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake) throw Error(ErrorCode::kInternal, std::string("eventfd: ") + std::strerror(errno));
  net::Fd connection_dup(::fcntl(connection, F_DUPFD_CLOEXEC, 0));
  auto s = std::make_unique<Session>(id, peer, client_name, std::move(segment), layout_,
                                     std::move(wake), std::move(connection_dup), resuming);
  Session& created = *s;
  ++of_uid;
  list_.push_back(s.get());
  sessions_.emplace(id, std::move(s));
  return created;
}

void SessionRegistry::remove(uint64_t id) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  if (--sessions_of_uid_[it->second->peer().uid] == 0)
    sessions_of_uid_.erase(it->second->peer().uid);
  std::erase(list_, it->second.get());
  sessions_.erase(it);
}

Session* SessionRegistry::find(uint64_t id) const {
  auto it = sessions_.find(id);
  return it == sessions_.end() ? nullptr : it->second.get();
}

Session& SessionRegistry::get(uint64_t id) const {
  Session* s = find(id);
  if (!s) throw Error(ErrorCode::kNotFound, "session " + std::to_string(id) + " is not attached");
  return *s;
}

uint64_t SessionRegistry::host_buffer_bytes_of_uid(uid_t uid) const {
  uint64_t bytes = 0;
  for (const Session* s : list_)
    if (s->peer().uid == uid) bytes += s->host_buffer_bytes;
  return bytes;
}

}  // namespace iris::daemon
