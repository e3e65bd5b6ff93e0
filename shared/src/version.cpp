#include "iris/shared/version.hpp"

namespace iris {

std::string_view release_version() { return IRIS_VERSION; }
std::string_view build_info() { return IRIS_BUILD_INFO; }

}  // namespace iris
