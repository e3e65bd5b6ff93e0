// Where clients and iris-ctl find irisd when told nothing: $IRIS_SOCKET, else the systemd
// service's socket.
#pragma once

#include <cstdlib>
#include <string>

namespace iris {

inline std::string default_socket() {
  const char* env = std::getenv("IRIS_SOCKET");
  return env != nullptr && *env != '\0' ? env : "/run/irisd/irisd.sock";
}

}  // namespace iris
