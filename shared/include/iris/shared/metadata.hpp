// gRPC metadata keys of the control plane, shared by irisd and libiris.
#pragma once

namespace iris {

// The token an attach returned: it lets the gRPC lists show that uid's sessions.
inline constexpr const char* kTokenMetadataKey = "iris-token";
inline constexpr const char* kProtocolMetadataKey = "iris-protocol-version";

}  // namespace iris
