// The error shared/ throws when the operating system refuses a call: iris::Error with a code
// from errno (a limit reached, permission refused, nothing listening, else internal) and the
// call named, so libiris and irisd pass it on without wrapping it again.
#pragma once

#include <cerrno>
#include <cstring>
#include <string>

#include "iris/error.hpp"

namespace iris {

inline ErrorCode code_of_errno(int error) {
  switch (error) {
    case EACCES:
    case EPERM:
      return ErrorCode::kPermissionDenied;
    case ENOMEM:
    case ENOSPC:
    case EMFILE:
    case ENFILE:
    case ENOBUFS:
      return ErrorCode::kLimitExceeded;
    case ECONNREFUSED:
    case ENOENT:
      return ErrorCode::kUnavailable;
    default:
      return ErrorCode::kInternal;
  }
}

// `what` failed with errno: "what: strerror(errno)", coded by code_of_errno.
inline Error os_error(const std::string& what) {
  const int error = errno;
  return Error(code_of_errno(error), what + ": " + std::strerror(error));
}

}  // namespace iris
