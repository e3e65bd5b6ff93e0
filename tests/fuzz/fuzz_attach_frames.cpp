// Fuzzes what the attach listener reads from a connection: bytes arrive in arbitrary pieces on a
// non-blocking socket and are reassembled into frames, each parsed as an attach request and as a
// session request and converted the way the front doors convert them.
#include <sys/socket.h>
#include <unistd.h>

#include "daemon/front/wire.hpp"
#include "iris/error.hpp"
#include "iris/shared/unix_socket.hpp"
#include "iris/v1/attach.pb.h"

#include <google/protobuf/stubs/logging.h>

using namespace iris;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Malformed strings are the point here; irisd routes protobuf's complaints to debug logging.
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, pair) != 0) return 0;
  net::Fd writer(pair[0]), reader_fd(pair[1]);
  net::FrameReader reader(4);
  std::size_t at = 0;
  while (at < size) {
    // The first byte of each piece says how long the piece is: splits land anywhere.
    const std::size_t piece = std::min<std::size_t>(1 + data[at] % 64, size - at);
    if (::send(writer.get(), data + at, piece, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) break;
    at += piece;
    if (reader.read_some(reader_fd.get()) != net::FrameReader::Status::kOpen) break;
    while (auto frame = reader.next()) {
      v1::AttachRequest attach;
      if (attach.ParseFromString(frame->payload)) {
        try {
          daemon::require_protocol(std::to_string(attach.protocol_version()));
        } catch (const Error&) {
        }
      }
      v1::SessionRequest request;
      if (!request.ParseFromString(frame->payload)) continue;
      try {
        if (request.has_register_vmm()) daemon::vmm_export(request.register_vmm(), frame->fds);
        if (request.has_register_ipc())
          daemon::ipc_export(request.register_ipc().buffer(), daemon::DeviceApi::kCuda);
      } catch (const Error&) {
      }
    }
  }
  return 0;
}
