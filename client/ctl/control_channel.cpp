#include "client/ctl/control_channel.hpp"

namespace iris::client {

Error to_error(const grpc::Status& status, const std::string& socket_path, const char* what) {
  const std::string& details = status.error_details();
  if (!details.empty() && details.find_first_not_of("0123456789") == std::string::npos) {
    return Error(static_cast<ErrorCode>(std::stoul(details)),
                 std::string(what) + ": " + status.error_message());
  }
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE)
    return Error(ErrorCode::kUnavailable,
                 std::string(what) + ": cannot reach irisd at unix:" + socket_path + " (" +
                     status.error_message() + "); is irisd running? (systemctl status irisd)");
  // A daemon stopping mid-call cancels it: that is irisd going away, not a bug.
  if (status.error_code() == grpc::StatusCode::CANCELLED ||
      status.error_code() == grpc::StatusCode::ABORTED)
    return Error(ErrorCode::kDaemonGone, std::string(what) + ": irisd stopped during the call (" +
                                             status.error_message() + ")");
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED)
    return Error(ErrorCode::kTimeout,
                 std::string(what) + ": irisd did not answer in time (" + socket_path + ")");
  return Error(ErrorCode::kInternal, std::string(what) + ": " + status.error_message() +
                                         " (a bug: please report it with irisd's log)");
}

ControlChannel::ControlChannel(std::string socket_path, std::chrono::milliseconds timeout)
    : socket_path_(std::move(socket_path)),
      timeout_(timeout),
      stub_(v1::Control::NewStub(
          grpc::CreateChannel("unix:" + socket_path_, grpc::InsecureChannelCredentials()))) {}

}  // namespace iris::client
