// The first exchange on irisd's attach socket, the same for a rank's session and for iris-ctl's
// operator-only attach: connect, send the AttachRequest, read the answer and the descriptors it
// carries, and turn every failure into an iris::Error.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "iris/shared/unix_socket.hpp"
#include "iris/v1/attach.pb.h"

namespace iris::client {

struct Attached {
  net::Fd connection;  // stays open for the session's lifetime
  v1::AttachResponse response;
  std::vector<net::Fd> fds;  // what the answer carried (a session's wake fd and segment)
};

// Sets the protocol version in `request`. Throws kUnavailable when irisd cannot be reached or
// does not answer, and the daemon's own code and message when it refuses. An attach refused as
// busy (this user attached too often in the last second) is tried again, backing off, until
// `timeout` has passed. `fds` ride with the request (a resuming session's segment).
Attached attach(const std::string& socket_path, v1::AttachRequest request,
                std::chrono::milliseconds timeout, std::size_t max_fds,
                const std::vector<int>& fds = {});

}  // namespace iris::client
