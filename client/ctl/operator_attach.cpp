#include "client/ctl/operator_attach.hpp"

#include "client/src/attach_handshake.hpp"

namespace iris::ctl {

OperatorAttach::OperatorAttach(const std::string& socket_path) {
  v1::AttachRequest request;
  request.set_client_name("iris-ctl");
  request.set_operator_only(true);
  client::Attached attached = client::attach(socket_path, request, std::chrono::seconds(10), 0);
  connection_ = std::move(attached.connection);
  token_ = attached.response.token();
}

}  // namespace iris::ctl
