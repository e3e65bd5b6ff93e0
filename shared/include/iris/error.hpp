// The exception libiris and irisd throw: an ErrorCode plus a message that says what to do.
#pragma once

#include <stdexcept>
#include <string>

#include "iris/error_code.hpp"

namespace iris {

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message)
      : std::runtime_error(std::string(to_string(code)) + ": " + message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace iris
