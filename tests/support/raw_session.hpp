// irisd's attach protocol spoken by hand, for tests that act as a hostile client would: what
// libiris never sends, descriptors it never keeps (the segment's memfd), frames it never splits.
#pragma once

#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "iris/shared/segment_layout.hpp"
#include "iris/shared/shm_segment.hpp"
#include "iris/shared/unix_socket.hpp"
#include "iris/shared/version.hpp"
#include "iris/v1/control.pb.h"

namespace iris::testing {

struct RawSession {
  net::Fd connection;
  v1::AttachResponse welcome;
  std::vector<net::Fd> fds;  // [wake, segment] of a session attach

  static RawSession attach(const std::string& socket_path, bool operator_only = false,
                           const std::string& client_name = "raw-session") {
    RawSession s;
    s.connection = net::connect_unix(socket_path + ".attach");
    v1::AttachRequest request;
    request.set_protocol_version(kProtocolVersion);
    request.set_client_name(client_name);
    request.set_operator_only(operator_only);
    net::send_frame(s.connection.get(), request.SerializeAsString());
    if (auto frame = net::recv_frame(s.connection.get(), std::chrono::seconds(10), 4)) {
      s.welcome.ParseFromString(frame->payload);
      s.fds = std::move(frame->fds);
    }
    return s;
  }

  // One session call; the descriptors of the answer go to `received`.
  v1::SessionResponse call(const v1::SessionRequest& request,
                           std::vector<net::Fd>* received = nullptr) {
    v1::SessionResponse response;
    if (!net::send_frame(connection.get(), request.SerializeAsString())) return response;
    if (auto frame = net::recv_frame(connection.get(), std::chrono::seconds(10), 4)) {
      response.ParseFromString(frame->payload);
      if (received != nullptr) *received = std::move(frame->fds);
    }
    return response;
  }
};

// Ring entries pushed by hand into a session segment (libiris keeps one slot per request; a
// hostile client reuses them).
struct RawRing {
  shm::ShmSegment segment;
  shm::SegmentView view;
  shm::RingProducer<shm::SubmitEntry> ring;
  explicit RawRing(net::Fd segment_fd)
      : segment(shm::ShmSegment::map(std::move(segment_fd))),
        view(*shm::validate_segment(segment.data(), segment.size())),
        ring(view.ring_control, view.ring_entries, view.ring_depth) {}
  void push(const shm::SubmitEntry& e) {
    while (!ring.try_push(e)) std::this_thread::yield();
  }
};

}  // namespace iris::testing
