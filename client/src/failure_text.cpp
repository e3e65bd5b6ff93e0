#include "client/src/failure_text.hpp"

namespace iris {

std::string describe_failure(ErrorCode code) {
  switch (code) {
    case ErrorCode::kPeerLost:
      return "another rank of the communicator died or left; re-create the communicator";
    case ErrorCode::kSizeMismatch:
      return "the ranks passed different byte counts to this collective (for all_to_all_v: what "
             "one rank sends another differs from what that rank expects)";
    case ErrorCode::kSequenceError:
      return "sequence number reused or skipped (ranks submitted collectives out of order)";
    case ErrorCode::kOutOfRange:
      return "an offset or size lies past the end of a registered buffer (the daemon log names "
             "it)";
    case ErrorCode::kNotFound:
      return "unknown buffer or communicator for this session";
    case ErrorCode::kInvalidArgument:
      return "malformed request (the daemon log says which field)";
    case ErrorCode::kLimitExceeded:
      return "too many requests in flight: on one communicator (irisd's --max-inflight) or in "
             "one session (more than its completion slots, the ring depth)";
    case ErrorCode::kEngineError:
      return "the copy engine failed a transfer (see the daemon log)";
    default:
      return "collective failed; some rank passed a bad request (see the daemon log)";
  }
}

}  // namespace iris
