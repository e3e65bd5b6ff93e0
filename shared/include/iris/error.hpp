// The exception libiris and irisd throw: an ErrorCode plus a message that says what to do.
#pragma once

#include <stdexcept>
#include <string>

#include "iris/error_code.hpp"

namespace iris {

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message)
      : std::runtime_error(std::string(to_string(code)) + ": " + message),
        code_(code),
        message_(message) {}
  ErrorCode code() const noexcept { return code_; }
  // The message without the code's name (what() has both); this is what goes on the wire.
  const std::string& message() const noexcept { return message_; }

 private:
  ErrorCode code_;
  std::string message_;
};

}  // namespace iris
