// Result codes, the last error and NCCL_DEBUG output (nccl_errors.hpp).
#include "client/nccl/nccl_errors.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace iris::nccl {

ncclResult_t result_of(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk:
      return ncclSuccess;
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kOutOfRange:
      return ncclInvalidArgument;
    case ErrorCode::kNotFound:
    case ErrorCode::kPermissionDenied:
    case ErrorCode::kAlreadyExists:
    case ErrorCode::kSizeMismatch:
    case ErrorCode::kSequenceError:
    case ErrorCode::kNranksMismatch:
    case ErrorCode::kCancelled:  // ncclCommAbort stopped it
      return ncclInvalidUsage;
    case ErrorCode::kPeerLost:
    case ErrorCode::kTimeout:
      return ncclRemoteError;
    case ErrorCode::kEngineError:
      return ncclUnhandledCudaError;
    case ErrorCode::kInternal:
      return ncclInternalError;
    case ErrorCode::kLimitExceeded:
    case ErrorCode::kBusy:
    case ErrorCode::kDaemonGone:
    case ErrorCode::kProtocolMismatch:
    case ErrorCode::kUnavailable:
      return ncclSystemError;
  }
  return ncclInternalError;
}

DebugLevel debug_level() {
  static const DebugLevel level = [] {
    const char* v = std::getenv("NCCL_DEBUG");
    if (v == nullptr) return DebugLevel::kNone;
    if (strcasecmp(v, "VERSION") == 0) return DebugLevel::kVersion;
    if (strcasecmp(v, "WARN") == 0) return DebugLevel::kWarn;
    if (strcasecmp(v, "INFO") == 0) return DebugLevel::kInfo;
    if (strcasecmp(v, "TRACE") == 0) return DebugLevel::kTrace;
    return DebugLevel::kNone;
  }();
  return level;
}

void debug_print(DebugLevel level, const std::string& text) {
  if (level > debug_level() || debug_level() == DebugLevel::kNone) return;
  char host[64] = "?";
  ::gethostname(host, sizeof host - 1);
  const char* name = level == DebugLevel::kWarn ? "WARN" : "INFO";
  std::fprintf(stderr, "%s:%d:%ld [irisd] NCCL %s %s\n", host, ::getpid(),
               static_cast<long>(::syscall(SYS_gettid)), name, text.c_str());
}

namespace {
thread_local std::string last;
}

void set_last_error(const std::string& message) { last = message; }
const char* last_error() { return last.c_str(); }

}  // namespace iris::nccl
