// A listening TCP socket on HOST:PORT, for irisd's servers on the network (the metrics, the
// meeting point): parsing the address and binding written once.
#pragma once

#include <cstdint>
#include <string>

#include "iris/shared/unix_socket.hpp"

namespace iris::daemon {

// Listens, non-blocking, on `address`: HOST:PORT or [V6]:PORT, port 0 for any free one (`port`
// gets the bound one). Throws std::runtime_error naming `what` and the address.
net::Fd listen_tcp(const std::string& what, const std::string& address, uint16_t& port);

// `address` with its port replaced by `port` (HOST:0 as it was bound).
std::string with_port(const std::string& address, uint16_t port);

}  // namespace iris::daemon
