// ncclUniqueId's 128 bytes as irisd's NCCL-API library fills them: a mark, a format version and
// 16 random bytes, from which every rank that presents the id names the same irisd communicator.
// irisd scopes communicator names by user, so an id another user guesses or copies joins nothing
// of ours. The rest of the id is zero, kept for what a later format carries.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace iris::nccl {

inline constexpr std::size_t kUniqueIdBytes = 128;

// A new id's bytes (random from the kernel's getrandom).
void make_unique_id(char (&id)[kUniqueIdBytes]);
// The irisd communicator key an id names; nullopt when the bytes are no id this library made (a
// real NCCL's id, or garbage).
std::optional<std::string> key_of_unique_id(const char (&id)[kUniqueIdBytes]);
// The key of a communicator made from `parent` (ncclCommSplit, ncclCommShrink): the same on every
// rank that passes the same parent, what and `index` (the parent's children so far), and of
// fixed length however deep the splits go.
std::string derived_key(const std::string& parent, const std::string& what, uint64_t index);

}  // namespace iris::nccl
