// Tokens for the gRPC lists. gRPC 1.51 does not tell irisd who calls, so every attach (a
// client's, or iris-ctl's operator-only one) gets a random token bound to the uid the kernel
// reported for that connection, valid while the connection stays open. A list call carrying it
// shows that uid's own sessions and communicators, or all of them for root and members of the
// operator group. Thread-safe: the attach listener adds and removes, gRPC threads look up.
#pragma once

#include <sys/types.h>

#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

namespace iris::daemon {

struct Caller {
  uid_t uid;
  bool sees_all;  // root or a member of the operator group
};

class CallerTokens {
 public:
  // A fresh random token for `caller`.
  std::string issue(const Caller& caller);
  void revoke(const std::string& token);
  std::optional<Caller> find(const std::string& token) const;

 private:
  mutable std::mutex mutex_;
  std::unordered_map<std::string, Caller> tokens_;
};

// Whether the peer (pid, uid, gid from SO_PEERCRED) is root or in `group` (peer_group.hpp).
// Empty group: root only.
bool is_operator(pid_t pid, uid_t uid, gid_t gid, const std::string& group);

}  // namespace iris::daemon
