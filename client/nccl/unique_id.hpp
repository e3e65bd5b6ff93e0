// ncclUniqueId's 128 bytes as irisd's NCCL-API library fills them: a mark, a format version, 48
// random bytes and, when the root's irisd has one, its meeting point (HOST:PORT). Every rank that
// presents the id names the same irisd communicator (the first 16 random bytes); across nodes
// the ranks meet at the meeting point under the other 32, which also become the scale-out
// secret, so the key that iris-ctl shows gives away nothing of it. irisd scopes communicator
// names by user, so an id another user guesses or copies joins nothing of ours.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace iris::nccl {

inline constexpr std::size_t kUniqueIdBytes = 128;
inline constexpr std::size_t kMaxMeetingPointBytes = 64;

struct UniqueId {
  std::string key;            // the irisd communicator's name
  std::string secret;         // 32 bytes: the job's name at the meeting point, and across nodes
  std::string meeting_point;  // HOST:PORT; empty: the job stays on the root's node
};

// A new id's bytes (random from the kernel's getrandom) with `meeting_point` (at most
// kMaxMeetingPointBytes; throws std::invalid_argument beyond).
void make_unique_id(char (&id)[kUniqueIdBytes], const std::string& meeting_point);
// What an id says; nullopt when the bytes are no id this library made (a real NCCL's id, or
// garbage).
std::optional<UniqueId> read_unique_id(const char (&id)[kUniqueIdBytes]);
// The key of a communicator made from `parent` (ncclCommSplit, ncclCommShrink): the same on every
// rank that passes the same parent, what and `index` (the parent's children so far), and of
// fixed length however deep the splits go.
std::string derived_key(const std::string& parent, const std::string& what, uint64_t index);

}  // namespace iris::nccl
