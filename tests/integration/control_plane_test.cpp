// irisd's gRPC service, called directly (no libiris): the operator's read-only view. Status and
// stats are aggregates anyone may read; the session and communicator lists need the token of an
// open attach connection and show only what that uid may see.
#include <gtest/gtest.h>

#include <future>
#include <thread>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/support/byte_buffer.h>

#include "client/ctl/operator_attach.hpp"
#include "client/src/control_channel.hpp"
#include "tests/support/daemon_process.hpp"

namespace iris::testing {
namespace {

ErrorCode code_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  }
  return ErrorCode::kOk;
}

TEST(ControlPlane, ListsNeedTheTokenOfAnOpenAttach) {
  DaemonProcess daemon;
  client::ControlChannel anonymous(daemon.socket());
  EXPECT_EQ(code_of([&] {
              anonymous.call(&v1::Control::Stub::ListSessions, v1::ListSessionsRequest{}, "list");
            }),
            ErrorCode::kPermissionDenied);
  client::ControlChannel guessing(daemon.socket());
  guessing.set_token("not-a-token");
  EXPECT_EQ(code_of([&] {
              guessing.call(&v1::Control::Stub::ListComms, v1::ListCommsRequest{}, "list");
            }),
            ErrorCode::kPermissionDenied);
  EXPECT_EQ(code_of([&] {
              anonymous.call(&v1::Control::Stub::GetStats, v1::GetStatsRequest{}, "stats");
            }),
            ErrorCode::kOk)
      << "stats are aggregates: anyone who may open the socket reads them";

  // A token works while its attach connection is open, and not after.
  std::string token;
  {
    ctl::OperatorAttach attach(daemon.socket());
    token = attach.token();
    client::ControlChannel with_token(daemon.socket());
    with_token.set_token(token);
    EXPECT_EQ(code_of([&] {
                with_token.call(&v1::Control::Stub::ListSessions, v1::ListSessionsRequest{},
                                "list");
              }),
              ErrorCode::kOk);
  }
  client::ControlChannel stale(daemon.socket());
  stale.set_token(token);
  // The listener notices the closed connection on its next turn: give it a moment.
  ErrorCode code = ErrorCode::kOk;
  for (int i = 0; i < 200 && code == ErrorCode::kOk; ++i) {
    code = code_of(
        [&] { stale.call(&v1::Control::Stub::ListSessions, v1::ListSessionsRequest{}, "list"); });
    if (code == ErrorCode::kOk) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(code, ErrorCode::kPermissionDenied) << "a token outlived its connection";
}

TEST(ControlPlane, CallsWithoutTheProtocolHeaderAreRefused) {
  DaemonProcess daemon;
  auto stub = v1::Control::NewStub(
      grpc::CreateChannel("unix:" + daemon.socket(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  v1::GetStatusResponse status;
  EXPECT_EQ(stub->GetStatus(&ctx, {}, &status).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

// Health probes that speak gRPC (grpc_health_probe, Kubernetes' grpc probes through a proxy)
// ask the standard health service on the control socket. The request is an empty
// HealthCheckRequest (service ""); the answer's field 1 is the status, SERVING = 1.
TEST(ControlPlane, TheStandardGrpcHealthServiceSaysServing) {
  DaemonProcess daemon;
  auto channel = grpc::CreateChannel("unix:" + daemon.socket(), grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  // The health thread sets the status within a second of start.
  std::string answer;
  for (int attempt = 0; attempt < 50 && answer != std::string("\x08\x01", 2); ++attempt) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    grpc::Slice empty_message(std::string{});
    grpc::ByteBuffer request(&empty_message, 1), response;
    std::promise<grpc::Status> done;
    stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                   [&done](grpc::Status s) { done.set_value(std::move(s)); });
    const grpc::Status status = done.get_future().get();
    ASSERT_TRUE(status.ok()) << status.error_message();
    std::vector<grpc::Slice> slices;
    ASSERT_TRUE(response.Dump(&slices).ok());
    answer.clear();
    for (const auto& slice : slices)
      answer.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
    if (answer != std::string("\x08\x01", 2))
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(answer, std::string("\x08\x01", 2)) << "not SERVING";
}

}  // namespace
}  // namespace iris::testing
