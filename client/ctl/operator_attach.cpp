#include "client/ctl/operator_attach.hpp"

#include "iris/error.hpp"
#include "iris/shared/version.hpp"
#include "iris/v1/control.pb.h"

namespace iris::ctl {

OperatorAttach::OperatorAttach(const std::string& socket_path) {
  const std::string path = socket_path + ".attach";
  try {
    connection_ = net::connect_unix(path);
  } catch (const std::exception& e) {
    throw Error(ErrorCode::kUnavailable,
                std::string(e.what()) + "; is irisd running, and may this user use its socket?");
  }
  v1::AttachRequest request;
  request.set_protocol_version(kProtocolVersion);
  request.set_client_name("iris-ctl");
  request.set_operator_only(true);
  v1::AttachResponse response;
  if (!net::send_frame(connection_.get(), request.SerializeAsString()))
    throw Error(ErrorCode::kUnavailable, "irisd closed the attach socket " + path);
  auto frame = net::recv_frame(connection_.get(), std::chrono::seconds(10), 0);
  if (!frame || !response.ParseFromString(frame->payload))
    throw Error(ErrorCode::kUnavailable, "no attach answer from irisd on " + path);
  if (response.error_code() != 0)
    throw Error(static_cast<ErrorCode>(response.error_code()),
                "attach refused: " + response.error_message());
  token_ = response.token();
}

}  // namespace iris::ctl
