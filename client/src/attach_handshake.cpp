#include "client/src/attach_handshake.hpp"

#include <algorithm>
#include <thread>

#include "iris/error.hpp"
#include "iris/shared/version.hpp"

namespace iris::client {

namespace {
Attached attach_once(const std::string& path, const v1::AttachRequest& request,
                     std::chrono::milliseconds timeout, std::size_t max_fds,
                     const std::vector<int>& fds) {
  Attached out;
  try {
    out.connection = net::connect_unix(path);
  } catch (const std::exception& e) {
    throw Error(ErrorCode::kUnavailable,
                std::string(e.what()) + "; is irisd running, and may this user use its socket?");
  }
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
}  // namespace

Attached attach(const std::string& socket_path, v1::AttachRequest request,
                std::chrono::milliseconds timeout, std::size_t max_fds,
                const std::vector<int>& fds) {
  using clock = std::chrono::steady_clock;
  const std::string path = socket_path + ".attach";
  request.set_protocol_version(kProtocolVersion);
  const auto deadline = clock::now() + timeout;
  auto pause = std::chrono::milliseconds(5);
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now());
    try {
      return attach_once(path, request, std::max(left, std::chrono::milliseconds(1)), max_fds, fds);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kBusy || clock::now() + pause >= deadline) throw;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(200));
  }
}

}  // namespace iris::client
