// The message a rank sees for a failed collective when irisd gave no reason of its own: what
// happened and what to do.
#pragma once

#include <string>

#include "iris/error_code.hpp"

namespace iris {

std::string describe_failure(ErrorCode code);

}  // namespace iris
