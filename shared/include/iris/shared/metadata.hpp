// gRPC metadata keys of the control plane, shared by irisd and libiris.
#pragma once

namespace iris {

inline constexpr const char* kTokenMetadataKey = "iris-session-token";
inline constexpr const char* kProtocolMetadataKey = "iris-protocol-version";

}  // namespace iris
