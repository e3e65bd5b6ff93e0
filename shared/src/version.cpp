#include "iris/shared/version.hpp"

#include "iris_revision.hpp"  // generated on every build: cmake/WriteRevision.cmake

namespace iris {

std::string_view release_version() { return IRIS_VERSION; }
std::string_view build_info() { return IRIS_GIT_REV " " IRIS_BUILD_INFO; }

}  // namespace iris
