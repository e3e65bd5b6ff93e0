#include "client/src/attach_handshake.hpp"

#include "iris/error.hpp"
#include "iris/shared/version.hpp"

namespace iris::client {

Attached attach(const std::string& socket_path, v1::AttachRequest request,
                std::chrono::milliseconds timeout, std::size_t max_fds,
                const std::vector<int>& fds) {
  const std::string path = socket_path + ".attach";
  Attached out;
  try {
    out.connection = net::connect_unix(path);
  } catch (const std::exception& e) {
    throw Error(ErrorCode::kUnavailable,
                std::string(e.what()) + "; is irisd running, and may this user use its socket?");
  }
  request.set_protocol_version(kProtocolVersion);
  if (!net::send_frame(out.connection.get(), request.SerializeAsString(), fds))
    throw Error(ErrorCode::kUnavailable, "irisd closed the attach socket " + path);
  auto frame = net::recv_frame(out.connection.get(), timeout, max_fds);
  if (!frame || !out.response.ParseFromString(frame->payload))
    throw Error(ErrorCode::kUnavailable, "no attach answer from irisd on " + path);
  if (out.response.error_code() != 0)
    throw Error(static_cast<ErrorCode>(out.response.error_code()),
                "attach refused: " + out.response.error_message());
  out.fds = std::move(frame->fds);
  return out;
}

}  // namespace iris::client
