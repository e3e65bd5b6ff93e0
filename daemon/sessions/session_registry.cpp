#include "daemon/sessions/session_registry.hpp"

#include <fcntl.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include "iris/error.hpp"

namespace iris::daemon {

namespace {
std::string new_token() {
  static std::random_device entropy;  // getrandom(2) on Linux
  static constexpr char kHex[] = "0123456789abcdef";
  std::string token;
  for (int i = 0; i < 8; ++i) {
    uint32_t v = entropy();
    for (int j = 0; j < 8; ++j, v >>= 4) token.push_back(kHex[v & 0xf]);
  }
  return token;
}
}  // namespace

SessionRegistry::SessionRegistry(const Config& config)
    : config_(config), layout_(*shm::SegmentLayout::for_depth(config.limits.ring_depth)) {}

std::string SessionRegistry::segment_name(uint64_t session_id) const {
  return config_.shm_prefix() + "s" + std::to_string(session_id);
}

std::string SessionRegistry::buffer_name(uint64_t session_id, uint64_t buffer_id) const {
  return segment_name(session_id) + ".b" + std::to_string(buffer_id);
}

Session& SessionRegistry::create(const net::PeerCredentials& peer, const std::string& client_name,
                                 int connection) {
  if (sessions_.size() >= config_.limits.max_sessions)
    throw Error(ErrorCode::kLimitExceeded,
                "irisd already has " + std::to_string(sessions_.size()) +
                    " sessions (max_sessions); detach idle clients or raise --max-sessions");
  const uint64_t id = next_id_++;
  shm::ShmSegment segment;
  try {
    segment = shm::ShmSegment::create(segment_name(id), layout_.total_bytes, peer.uid);
  } catch (const std::exception& e) {
    throw Error(ErrorCode::kInternal, e.what());
  }
  shm::initialize_segment(segment.data(), layout_, id);
  net::Fd wake(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake) throw Error(ErrorCode::kInternal, std::string("eventfd: ") + std::strerror(errno));
  net::Fd connection_dup(::fcntl(connection, F_DUPFD_CLOEXEC, 0));
  std::string token = new_token();
  auto s = std::make_unique<Session>(id, peer, client_name, token, std::move(segment), layout_,
                                     std::move(wake), std::move(connection_dup));
  Session& created = *s;
  by_token_.emplace(std::move(token), id);
  list_.push_back(s.get());
  sessions_.emplace(id, std::move(s));
  return created;
}

void SessionRegistry::remove(uint64_t id) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  by_token_.erase(it->second->token());
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

uint64_t SessionRegistry::id_for_token(const std::string& token) const {
  auto it = by_token_.find(token);
  if (it == by_token_.end())
    throw Error(ErrorCode::kNotFound,
                "unknown session token: attach first (the session may have ended)");
  return it->second;
}

}  // namespace iris::daemon
