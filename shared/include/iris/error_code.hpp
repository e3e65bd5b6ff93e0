// Error codes shared by irisd, libiris and the wire (ring completions, gRPC error details).
// Values are part of the protocol: append, never renumber.
#pragma once

#include <cstdint>
#include <string_view>

namespace iris {

enum class ErrorCode : uint32_t {
  kOk = 0,
  kInvalidArgument = 1,    // malformed request: bad size, offset, rank, opcode
  kNotFound = 2,           // unknown buffer, communicator or session
  kOutOfRange = 3,         // offset/size past the end of a buffer, or overflowing 64 bits
  kPermissionDenied = 4,   // another uid's object, or the socket's mode/group refused us
  kAlreadyExists = 5,      // rank taken twice in a communicator
  kSizeMismatch = 6,       // ranks of one collective passed different byte counts
  kSequenceError = 7,      // sequence number reused or skipped
  kNranksMismatch = 8,     // CommInit with an nranks different from the communicator's
  kPeerLost = 9,           // another rank of the communicator died or left
  kLimitExceeded = 10,     // a configured limit (sessions, buffers, in-flight) was reached
  kBusy = 11,              // ring full and the caller asked not to wait
  kTimeout = 12,           // a wait ran out of time
  kDaemonGone = 13,        // irisd stopped or died
  kProtocolMismatch = 14,  // client and daemon speak different protocol versions
  kUnavailable = 15,       // irisd cannot be reached
  kInternal = 16,          // a bug: please report with the daemon log
  kEngineError = 17,       // the copy engine failed a transfer
  kCancelled = 18,         // the caller stopped a wait (its std::stop_token) before it ended
};

constexpr std::string_view to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk:
      return "ok";
    case ErrorCode::kInvalidArgument:
      return "invalid_argument";
    case ErrorCode::kNotFound:
      return "not_found";
    case ErrorCode::kOutOfRange:
      return "out_of_range";
    case ErrorCode::kPermissionDenied:
      return "permission_denied";
    case ErrorCode::kAlreadyExists:
      return "already_exists";
    case ErrorCode::kSizeMismatch:
      return "size_mismatch";
    case ErrorCode::kSequenceError:
      return "sequence_error";
    case ErrorCode::kNranksMismatch:
      return "nranks_mismatch";
    case ErrorCode::kPeerLost:
      return "peer_lost";
    case ErrorCode::kLimitExceeded:
      return "limit_exceeded";
    case ErrorCode::kBusy:
      return "busy";
    case ErrorCode::kTimeout:
      return "timeout";
    case ErrorCode::kDaemonGone:
      return "daemon_gone";
    case ErrorCode::kProtocolMismatch:
      return "protocol_mismatch";
    case ErrorCode::kUnavailable:
      return "unavailable";
    case ErrorCode::kInternal:
      return "internal";
    case ErrorCode::kEngineError:
      return "engine_error";
    case ErrorCode::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

constexpr uint32_t kErrorCodeCount = 19;

}  // namespace iris
