// iris-ctl's identity for the session and communicator lists: an operator-only attach on irisd's
// attach socket, where the kernel tells irisd iris-ctl's uid (gRPC cannot). irisd answers with a
// token, valid while this connection stays open, that the list calls carry.
#pragma once

#include <string>

#include "iris/shared/unix_socket.hpp"

namespace iris::ctl {

class OperatorAttach {
 public:
  // Throws iris::Error (kUnavailable when the attach socket cannot be reached).
  explicit OperatorAttach(const std::string& socket_path);
  const std::string& token() const { return token_; }

 private:
  net::Fd connection_;
  std::string token_;
};

}  // namespace iris::ctl
