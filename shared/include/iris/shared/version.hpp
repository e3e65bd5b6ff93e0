// Versions of the wire protocol and of the shared-memory layout. Bump kProtocolVersion on any
// change to control.proto semantics, the attach handshake or the segment layout.
#pragma once

#include <cstdint>
#include <string_view>

namespace iris {

inline constexpr uint32_t kProtocolVersion = 5;  // 4: send and recv; 5: resuming sessions
// The oldest client protocol irisd serves: libiris of the previous protocol attaches and runs
// (everything it sends means what it meant), it only does not resume. Raise it when a change
// makes older clients' calls mean something else.
inline constexpr uint32_t kOldestClientProtocol = 4;
inline constexpr uint32_t kSegmentVersion = 4;   // 4: graph plan slots
inline constexpr uint64_t kSegmentMagic = 0x3130474553534952ull;  // "IRISSEG1"

// Set from the build (CMake) so that status shows what runs.
std::string_view release_version();
std::string_view build_info();

}  // namespace iris
