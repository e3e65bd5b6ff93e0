#include "daemon/front/caller_tokens.hpp"

#include "daemon/sessions/peer_group.hpp"

#include <random>

namespace iris::daemon {

std::string CallerTokens::issue(const Caller& caller) {
  static std::random_device entropy;  // getrandom(2) on Linux
  static constexpr char kHex[] = "0123456789abcdef";
  std::string token;
  for (int i = 0; i < 8; ++i) {
    uint32_t v = entropy();
    for (int j = 0; j < 8; ++j, v >>= 4) token.push_back(kHex[v & 0xf]);
  }
  std::lock_guard lock(mutex_);
  tokens_.emplace(token, caller);
  return token;
}

void CallerTokens::revoke(const std::string& token) {
  std::lock_guard lock(mutex_);
  tokens_.erase(token);
}

std::optional<Caller> CallerTokens::find(const std::string& token) const {
  std::lock_guard lock(mutex_);
  auto it = tokens_.find(token);
  if (it == tokens_.end()) return std::nullopt;
  return it->second;
}

bool is_operator(pid_t pid, uid_t uid, gid_t gid, const std::string& group) {
  return uid == 0 || in_group(pid, gid, group);
}

}  // namespace iris::daemon
