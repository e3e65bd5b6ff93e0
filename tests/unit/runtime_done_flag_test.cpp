// A stream-ordered request whose GPU done flag cannot be written: the caller's stream would wait
// on it, so the request must report the failure (kEngineError), never success. Runs the real
// Runtime over an engine whose flag writes fail; the client side is played through the session
// segment directly.
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <vector>

#include "daemon/runtime.hpp"
#include "iris/shared/segment_layout.hpp"
#include "iris/shared/shm_segment.hpp"

namespace iris::daemon {
namespace {

// Imports "GPU memory" as plain memory and fails every done-flag write.
class FlagWriteFailsEngine final : public Engine {
 public:
  const EngineDescription& description() const override { return description_; }
  void stop() override {}  // copies nothing
  void submit(std::span<const CopyRequest> copies) override { submitted += copies.size(); }
  std::size_t poll(std::vector<CopyCompletion>&) override { return 0; }
  int completion_fd() const override { return fd_[0]; }
  ImportedMemory import_device_memory(const DeviceBufferExport& exported) override {
    return {flags_.data(), exported.bytes, 0, nullptr};
  }
  void write_device_word(int, std::byte*, uint32_t) override {
    throw Error(ErrorCode::kEngineError, "injected: the signalling stream is broken");
  }
  FlagWriteFailsEngine() : Engine(0) { ::socketpair(AF_UNIX, SOCK_STREAM, 0, fd_); }
  ~FlagWriteFailsEngine() override {
    ::close(fd_[0]);
    ::close(fd_[1]);
  }
  std::size_t submitted = 0;

 private:
  EngineDescription description_{"flag-write-fails", "test", {}, "", "", ""};
  std::vector<std::byte> flags_ = std::vector<std::byte>(1 << 16);
  int fd_[2] = {-1, -1};
};

TEST(RuntimeDoneFlags, AFlagThatCannotBeWrittenFailsTheRequest) {
  Config config;
  config.socket_path = "/tmp/iris-done-flag-test-" + std::to_string(::getpid()) + ".sock";
  FlagWriteFailsEngine engine;
  Stats stats;
  ProgressLoop loop(std::chrono::microseconds(0));
  Runtime runtime(config, engine, stats, loop);
  int connection[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, connection), 0);
  AttachResult attached =
      runtime.attach({::getpid(), ::getuid(), ::getgid()}, "test", connection[0]);
  runtime.start_serving(attached.session_id);  // as the attach listener does once answered
  DeviceBufferExport flags{DeviceApi::kCuda, "handle", "0000:00:00.0", 0, 4096, {}, {}};
  runtime.register_device_done_flags(attached.session_id, flags);
  const auto send = runtime.register_buffer(attached.session_id, 64);
  const auto recv = runtime.register_buffer(attached.session_id, 64);
  const uint64_t comm = runtime.comm_init(attached.session_id, "k", 1, 0);

  auto segment = shm::ShmSegment::map(std::move(attached.segment));
  auto view = *shm::validate_segment(segment.data(), segment.size());
  shm::RingProducer<shm::SubmitEntry> ring(view.ring_control, view.ring_entries, view.ring_depth);
  auto entry = shm::collective_entry({shm::Opcode::kAllGather, comm, send.id, 0, recv.id, 0, 64});
  entry.seq = 1;
  entry.slot = 3;
  entry.generation = 1;
  // The client's stream copied its block and reached the call.
  entry.flags = shm::kStreamOrdered | shm::kOwnBlockCopiedByClient;
  view.flags[3].ready.store(1);
  ASSERT_TRUE(ring.try_push(entry));
  for (int i = 0; i < 10; ++i) loop.poll_once();

  const uint64_t word = view.slots[3].word.load();
  ASSERT_TRUE(shm::completion_matches(word, 1));
  EXPECT_EQ(shm::completion_code(word), ErrorCode::kEngineError);
  EXPECT_EQ(engine.submitted, 0u) << "the own block needed no copy";
  EXPECT_EQ(stats.errors[static_cast<uint32_t>(ErrorCode::kEngineError)].load(), 1u);
  ::close(connection[1]);
  runtime.end_session(attached.session_id, false);
  ::close(connection[0]);
}

}  // namespace
}  // namespace iris::daemon
