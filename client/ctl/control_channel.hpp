// A gRPC channel to irisd's control socket that adds the protocol (and, once attached, the
// session token) to every call and turns failures into iris::Error. iris-ctl's: libiris speaks
// only the attach socket.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "iris/error.hpp"
#include "iris/shared/metadata.hpp"
#include "iris/shared/version.hpp"
#include "iris/v1/control.grpc.pb.h"

namespace iris::client {

// Turns a failed gRPC status into an iris::Error; `socket_path` goes into "not running" hints.
Error to_error(const grpc::Status& status, const std::string& socket_path, const char* what);

class ControlChannel {
 public:
  explicit ControlChannel(std::string socket_path,
                          std::chrono::milliseconds timeout = std::chrono::seconds(30));

  void set_token(std::string token) { token_ = std::move(token); }
  const std::string& socket_path() const { return socket_path_; }

  template <typename Request, typename Response>
  Response call(grpc::Status (v1::Control::Stub::*method)(grpc::ClientContext*, const Request&,
                                                          Response*),
                const Request& request, const char* what) const {
    grpc::ClientContext ctx;
    ctx.AddMetadata(kProtocolMetadataKey, std::to_string(kProtocolVersion));
    if (!token_.empty()) ctx.AddMetadata(kTokenMetadataKey, token_);
    ctx.set_deadline(std::chrono::system_clock::now() + timeout_);
    Response response;
    const grpc::Status status = (stub_.get()->*method)(&ctx, request, &response);
    if (!status.ok()) throw to_error(status, socket_path_, what);
    return response;
  }

 private:
  std::string socket_path_;
  std::chrono::milliseconds timeout_;
  std::string token_;
  std::unique_ptr<v1::Control::Stub> stub_;
};

}  // namespace iris::client
