// Turns an untrusted ring entry into one rank's checked collective arguments, or an error that
// names the problem. Everything a rank's request can get wrong on its own (unknown buffers,
// ranges past a buffer's end, 64-bit overflow, overlaps, a root out of range, torn
// all-to-all-v arguments) is caught here, before any copy; what ranks must agree on is checked
// by the plan (plan.hpp) as they arrive.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <variant>

#include "daemon/collectives/plan.hpp"
#include "daemon/sessions/mapped_buffer.hpp"
#include "iris/error_code.hpp"
#include "iris/shared/descriptor.hpp"

namespace iris::daemon {

struct ValidatedRequest {
  RankArgs args;
  // Null where the argument is insignificant on this rank (gather's receive buffer off the
  // root, scatter's send buffer off the root). Broadcast's one buffer is both.
  std::shared_ptr<MappedBuffer> send;
  std::shared_ptr<MappedBuffer> recv;
  bool stream_ordered = false;
};

struct ValidationError {
  ErrorCode code;
  std::string message;
};

// Returns the session's buffer with this id, or nullptr when the session has none.
using BufferLookup = std::function<std::shared_ptr<MappedBuffer>(uint64_t id)>;

// all-to-all-v's four arrays live in a host buffer of the session that its client can rewrite
// at any moment: they are copied out once, then checked, so a torn write fails the request and
// never changes what was checked.
std::variant<ValidatedRequest, ValidationError> validate_request(const shm::SubmitEntry& entry,
                                                                 uint32_t nranks, uint32_t rank,
                                                                 const BufferLookup& lookup);

}  // namespace iris::daemon
