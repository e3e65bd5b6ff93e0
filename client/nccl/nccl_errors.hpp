// How the library reports: every entry point returns an ncclResult_t, keeps its message for
// ncclGetLastError, and writes it to stderr at NCCL_DEBUG=WARN or INFO, as NCCL does. irisd's
// error codes map to the ncclResult_t a caller of NCCL would branch on (a rank's death is
// ncclRemoteError, a bad argument ncclInvalidArgument), and the daemon's reason goes through
// unchanged, prefixed with the entry point.
#pragma once

#include <stdexcept>
#include <string>

#include "client/nccl/include/nccl.h"
#include "iris/error.hpp"

namespace iris::nccl {

// The library's own refusals (a bad argument, a call it cannot serve).
class NcclError : public std::runtime_error {
 public:
  NcclError(ncclResult_t result, const std::string& message)
      : std::runtime_error(message), result_(result) {}
  ncclResult_t result() const noexcept { return result_; }

 private:
  ncclResult_t result_;
};

ncclResult_t result_of(ErrorCode code);

// NCCL_DEBUG: nothing by default; WARN prints failures, INFO also what each communicator is.
enum class DebugLevel { kNone, kVersion, kWarn, kInfo, kTrace };
DebugLevel debug_level();
// One line on stderr, "host:pid:tid [irisd] NCCL <level> <text>", when `level` is enabled.
void debug_print(DebugLevel level, const std::string& text);

// The last failure's message: this thread's, as ncclGetLastError(NULL) returns it.
void set_last_error(const std::string& message);
const char* last_error();

// Runs `body`, turning what it throws into its ncclResult_t and a message naming `function`.
template <typename Body>
ncclResult_t guarded(const char* function, Body&& body) noexcept {
  std::string message;
  ncclResult_t result;
  try {
    return body();
  } catch (const NcclError& e) {
    result = e.result();
    message = e.what();
  } catch (const Error& e) {
    result = result_of(e.code());
    message = e.what();
  } catch (const std::bad_alloc&) {
    result = ncclSystemError;
    message = "out of host memory";
  } catch (const std::exception& e) {
    result = ncclInternalError;
    message = e.what();
  }
  message = std::string(function) + ": " + message;
  set_last_error(message);
  debug_print(DebugLevel::kWarn, message);
  return result;
}

}  // namespace iris::nccl
