// irisd's attach protocol spoken by hand, for tests that act as a hostile client would: what
// libiris never sends, descriptors it never keeps (the segment's memfd), frames it never splits.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "iris/error_code.hpp"
#include "iris/shared/descriptor.hpp"
#include "iris/shared/segment_layout.hpp"
#include "iris/shared/shm_segment.hpp"
#include "iris/shared/unix_socket.hpp"
#include "iris/shared/version.hpp"
#include "iris/v1/attach.pb.h"

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

// A whole session spoken by hand: host buffers, a communicator, entries pushed into its ring
// (any slot, any content) and their completions read from the segment. For tests that submit
// what libiris never would, or tamper with the session's shared memory.
struct RawClient {
  RawSession session;
  RawRing ring;
  std::vector<shm::ShmSegment> buffers;  // host buffers irisd allocated, kept mapped
  uint32_t next_generation = 1;

  static RawClient attach(const std::string& socket_path, const std::string& name = "raw-client") {
    RawSession s = RawSession::attach(socket_path, false, name);
    if (s.fds.size() != 2) throw std::runtime_error("raw attach: no segment came with the answer");
    net::Fd segment = std::move(s.fds[1]);
    return RawClient{std::move(s), RawRing(std::move(segment)), {}, 1};
  }

  struct HostBuffer {
    uint64_t id;
    std::byte* data;
  };
  HostBuffer allocate(uint64_t bytes) {
    v1::SessionRequest request;
    request.mutable_allocate_host()->set_bytes(bytes);
    std::vector<net::Fd> fds;
    const auto response = session.call(request, &fds);
    if (response.error_code() != 0 || fds.size() != 1)
      throw std::runtime_error("raw allocate: " + response.error_message());
    buffers.push_back(shm::ShmSegment::map(std::move(fds[0])));
    return {response.registered().buffer_id(), static_cast<std::byte*>(buffers.back().data())};
  }

  uint64_t comm_init(const std::string& key, uint32_t nranks, uint32_t rank) {
    v1::SessionRequest request;
    request.mutable_comm_init()->set_key(key);
    request.mutable_comm_init()->set_nranks(nranks);
    request.mutable_comm_init()->set_rank(rank);
    const auto response = session.call(request);
    if (response.error_code() != 0)
      throw std::runtime_error("raw comm_init: " + response.error_message());
    return response.comm_id();
  }

  // Pushes `e` into the ring with completion slot `slot` and a fresh generation, rings the
  // wake eventfd, and returns the generation its completion will carry.
  uint32_t submit(shm::SubmitEntry e, uint32_t slot = 0) {
    e.slot = slot;
    e.generation = next_generation++;
    ring.push(e);
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t r = ::write(session.fds[0].get(), &one, sizeof(one));
    return e.generation;
  }

  // The code irisd completed (slot, generation) with, or kTimeout when it did not in time.
  ErrorCode wait(uint32_t slot, uint32_t generation,
                 std::chrono::milliseconds timeout = std::chrono::seconds(10)) const {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      const uint64_t word = ring.view.slots[slot].word.load(std::memory_order_acquire);
      if (shm::completion_matches(word, generation)) return shm::completion_code(word);
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    return ErrorCode::kTimeout;
  }

  // True once irisd has closed the session's attach connection (it ended the session).
  bool connection_closed(std::chrono::milliseconds timeout) const {
    pollfd p{session.connection.get(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return false;
    char byte;
    return ::recv(session.connection.get(), &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
  }
};

// A resume attach carrying `fds` (the segment the client claims it had): the answer.
inline v1::AttachResponse resume_attach(const std::string& socket_path, const std::vector<int>& fds,
                                        net::Fd* keep = nullptr, uint64_t held_ms = 0,
                                        uint64_t next_buffer_id = 0) {
  net::Fd connection = net::connect_unix(socket_path + ".attach");
  v1::AttachRequest request;
  request.set_protocol_version(kProtocolVersion);
  request.set_client_name("forger");
  request.mutable_resume()->set_ring_depth(256);
  request.mutable_resume()->set_held_ms(held_ms);
  request.mutable_resume()->set_next_buffer_id(next_buffer_id);
  net::send_frame(connection.get(), request.SerializeAsString(), fds);
  v1::AttachResponse answer;
  if (auto frame = net::recv_frame(connection.get(), std::chrono::seconds(10), 4))
    answer.ParseFromString(frame->payload);
  if (keep != nullptr) *keep = std::move(connection);
  return answer;
}

// A memfd of `bytes`, sealed against shrinking or not, its first bytes `fill`.
inline net::Fd forged_memfd(std::size_t bytes, bool sealed, unsigned char fill = 0) {
  net::Fd fd(::memfd_create("forged", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) throw std::runtime_error("ftruncate");
  std::vector<unsigned char> head(std::min<std::size_t>(bytes, 4096), fill);
  if (::pwrite(fd.get(), head.data(), head.size(), 0) != static_cast<ssize_t>(head.size()))
    throw std::runtime_error("pwrite");
  if (sealed && ::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0)
    throw std::runtime_error("F_ADD_SEALS");
  return fd;
}

}  // namespace iris::testing
