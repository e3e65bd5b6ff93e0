// Host memory shared between two sessions of one process (Client::share; irisd's
// ShareHostBuffer): two clients, ranks 0 and 1 of one communicator, gather into one allocation of
// the first and read from it, each naming the same addresses; the memory lives while either Buffer
// does; the calls that cannot share are refused with the reason. Then the request as a hostile
// client sends it: no descriptor, a memfd that can shrink, one smaller than it says, a pipe, sizes
// past the limits; each refused, and irisd serves the next client.
#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "iris/iris.hpp"
#include "tests/support/client_helpers.hpp"
#include "tests/support/ctl_json.hpp"
#include "tests/support/daemon_process.hpp"
#include "tests/support/raw_session.hpp"

namespace iris::testing {
namespace {

constexpr std::size_t kBlock = 64 << 10;

ErrorCode code_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.code();
  }
  return ErrorCode::kOk;
}

uint64_t registered_buffers(const DaemonProcess& daemon) {
  return ctl_json(daemon, {"stats"})["stats"]["registered_buffers"];
}

TEST(SharedHostBuffer, TwoClientsOfOneProcessGatherIntoTheSameMemory) {
  DaemonProcess daemon;
  Client a = Client::connect(options_for(daemon, "share-a"));
  Client b = Client::connect(options_for(daemon, "share-b"));
  // One allocation of a's: both ranks' send blocks, then each rank's receive area.
  Buffer memory = a.allocate(6 * kBlock);
  auto* bytes = memory.as<unsigned char>();
  std::memset(bytes, 0xa0, kBlock);
  std::memset(bytes + kBlock, 0xb1, kBlock);
  const uint64_t before = registered_buffers(daemon);
  Buffer shared = b.share(memory);
  EXPECT_EQ(shared.data(), memory.data());
  EXPECT_EQ(shared.size(), memory.size());
  EXPECT_EQ(registered_buffers(daemon), before + 1);

  std::thread rank1([&] {
    Communicator comm = Communicator::init(b, "shared-host", 2, 1);
    comm.all_gather(bytes + kBlock, bytes + 4 * kBlock, kBlock).wait();
    comm.destroy();
  });
  Communicator comm = Communicator::init(a, "shared-host", 2, 0);
  comm.all_gather(bytes, bytes + 2 * kBlock, kBlock).wait();
  comm.destroy();
  rank1.join();
  for (std::size_t area : {2, 4}) {
    EXPECT_EQ(bytes[area * kBlock], 0xa0);
    EXPECT_EQ(bytes[(area + 1) * kBlock - 1], 0xa0);
    EXPECT_EQ(bytes[(area + 1) * kBlock], 0xb1);
    EXPECT_EQ(bytes[(area + 2) * kBlock - 1], 0xb1);
  }

  // The first client lets go of it: the second's registration keeps the memory (both sides).
  memory = Buffer();
  EXPECT_EQ(registered_buffers(daemon), before);
  std::memset(bytes, 0x5c, kBlock);
  Communicator alone = Communicator::init(b, "shared-alone", 1, 0);
  alone.all_gather(bytes, bytes + 3 * kBlock, kBlock).wait();
  EXPECT_EQ(bytes[3 * kBlock], 0x5c);
  EXPECT_EQ(bytes[4 * kBlock - 1], 0x5c);
  alone.destroy();

  // What cannot be shared, refused with a code.
  EXPECT_EQ(code_of([&] { b.share(shared); }), ErrorCode::kInvalidArgument);  // b's own
  EXPECT_EQ(code_of([&] { a.share(Buffer()); }), ErrorCode::kInvalidArgument);
}

// One ShareHostBuffer call on a raw session with `fds` beside it.
v1::SessionResponse share_call(RawSession& session, uint64_t bytes, const std::vector<int>& fds) {
  v1::SessionRequest request;
  request.mutable_share_host()->set_bytes(bytes);
  v1::SessionResponse response;
  if (!net::send_frame(session.connection.get(), request.SerializeAsString(), fds)) return response;
  if (auto frame = net::recv_frame(session.connection.get(), std::chrono::seconds(10), 4))
    response.ParseFromString(frame->payload);
  return response;
}

TEST(SharedHostBuffer, WhatAHostileClientSendsIsRefusedWithTheReason) {
  DaemonProcess daemon({"--max-buffer-bytes", std::to_string(1 << 20)});
  auto raw = RawClient::attach(daemon.socket(), "share-attacker");
  const auto refused = [&](const v1::SessionResponse& r, ErrorCode code, const char* says) {
    EXPECT_EQ(r.error_code(), static_cast<uint32_t>(code)) << r.error_message();
    EXPECT_NE(r.error_message().find(says), std::string::npos) << r.error_message();
  };
  refused(share_call(raw.session, 4096, {}), ErrorCode::kInvalidArgument, "memfd");
  net::Fd loose = forged_memfd(4096, false);
  refused(share_call(raw.session, 4096, {loose.get()}), ErrorCode::kInvalidArgument, "sealed");
  net::Fd small = forged_memfd(4096, true);
  refused(share_call(raw.session, 8192, {small.get()}), ErrorCode::kInvalidArgument, "holds 4096");
  refused(share_call(raw.session, 0, {small.get()}), ErrorCode::kInvalidArgument, "at least 1");
  refused(share_call(raw.session, 2 << 20, {small.get()}), ErrorCode::kLimitExceeded,
          "max_buffer_bytes");
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  refused(share_call(raw.session, 4096, {pipe_fds[0]}), ErrorCode::kInvalidArgument, "sealed");
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
  const auto two = share_call(raw.session, 4096, {small.get(), small.get()});
  refused(two, ErrorCode::kInvalidArgument, "2 descriptors");
  // A sealed memfd of its own is the client's memory: registered, like a shared buffer.
  const auto own = share_call(raw.session, 4096, {small.get()});
  EXPECT_EQ(own.error_code(), 0u) << own.error_message();
  EXPECT_NE(own.registered().buffer_id(), 0u);

  // irisd goes on serving.
  Client honest = Client::connect(options_for(daemon, "honest"));
  Buffer send = honest.allocate(4096), recv = honest.allocate(4096);
  std::memset(send.data(), 0x42, 4096);
  Communicator comm = Communicator::init(honest, "after-attack", 1, 0);
  comm.all_gather(send.data(), recv.data(), 4096).wait();
  EXPECT_EQ(recv.as<unsigned char>()[4095], 0x42);
  comm.destroy();
}

}  // namespace
}  // namespace iris::testing
