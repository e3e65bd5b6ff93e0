// Turns an untrusted ring entry into a copy plan, or an error that names the problem.
// Pure: no daemon state beyond the lookup it is given, so it is unit-tested on its own.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <variant>

#include "daemon/mapped_buffer.hpp"
#include "iris/error_code.hpp"
#include "iris/shared/descriptor.hpp"

namespace iris::daemon {

struct ValidatedAllGather {
  std::shared_ptr<MappedBuffer> send;
  std::shared_ptr<MappedBuffer> recv;
  std::byte* send_ptr;
  std::byte* recv_ptr;    // start of the whole receive area (rank 0's block)
  uint64_t bytes;         // per rank
  bool in_place;          // send == recv + rank * bytes: the own block needs no copy
  bool own_block_copied;  // the client's stream copied the own block (kOwnBlockCopiedByClient)
};

struct ValidationError {
  ErrorCode code;
  std::string message;
};

// Returns the session's buffer with this id, or nullptr when the session has none.
using BufferLookup = std::function<std::shared_ptr<MappedBuffer>(uint64_t id)>;

std::variant<ValidatedAllGather, ValidationError> validate_all_gather(const shm::SubmitEntry& entry,
                                                                      uint32_t nranks,
                                                                      uint32_t rank,
                                                                      const BufferLookup& lookup);

}  // namespace iris::daemon
