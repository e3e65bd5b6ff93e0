// libiris's vendor-neutral GPU code over a fake GpuRuntime. export_gpu_buffer: an IPC-able
// allocation gives one handle and the range; VMM memory is walked allocation by allocation, one
// file descriptor each; ranges that do not fit give errors. StreamFlagsMapping: the first
// stream-ordered call sets up and registers the done flags before anything is enqueued, a client
// stays on one vendor, and a failed set-up leaves nothing behind.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <map>
#include <vector>

#include "client/gpu/stream_flags.hpp"

#include "client/gpu/gpu_runtime.hpp"
#include "iris/error.hpp"
#include "tests/unit/fake_gpu_runtime.hpp"

namespace iris {
namespace {

ErrorCode code_of(GpuRuntime& runtime, uintptr_t ptr, std::size_t bytes) {
  try {
    export_gpu_buffer(runtime, reinterpret_cast<void*>(ptr), bytes);
  } catch (const Error& e) {
    return e.code();
  }
  return ErrorCode::kOk;
}

TEST(GpuBufferExport, IpcAllocationGivesOneHandleAndTheRange) {
  FakeGpuRuntime hip(GpuVendor::kHip, true);
  hip.allocations[0x10000] = 0x4000;
  const ExportedGpuBuffer e = export_gpu_buffer(hip, reinterpret_cast<void*>(0x10100), 0x200);
  ASSERT_TRUE(e.ipc);
  EXPECT_EQ(e.ipc->handle(), "handle-65536");
  EXPECT_EQ(e.ipc->offset(), 0x100u);
  EXPECT_EQ(e.ipc->bytes(), 0x200u);
  EXPECT_EQ(e.ipc->bus_id(), "0000:0c:00.0");
  EXPECT_TRUE(e.fds.empty());
  EXPECT_TRUE(register_request(GpuVendor::kHip, *e.ipc).hip());
  EXPECT_FALSE(register_request(GpuVendor::kCuda, *e.ipc).hip());
  EXPECT_EQ(code_of(hip, 0x13f00, 0x200), ErrorCode::kOutOfRange) << "past the allocation";
  EXPECT_EQ(code_of(hip, 0x10000, 0), ErrorCode::kOutOfRange) << "empty";
}

TEST(GpuBufferExport, VmmRangeIsWalkedAllocationByAllocation) {
  FakeGpuRuntime cuda(GpuVendor::kCuda, false);
  cuda.allocations[0x100000] = 0x20000;  // three allocations mapped back to back
  cuda.allocations[0x120000] = 0x10000;
  cuda.allocations[0x130000] = 0x20000;
  const ExportedGpuBuffer e =
      export_gpu_buffer(cuda, reinterpret_cast<void*>(0x110000), 0x30000);  // ends in the third
  EXPECT_FALSE(e.ipc);
  EXPECT_EQ(e.vmm.offset(), 0x10000u);
  EXPECT_EQ(e.vmm.bytes(), 0x30000u);
  EXPECT_FALSE(e.vmm.hip());
  ASSERT_EQ(e.vmm.chunk_bytes_size(), 3);
  EXPECT_EQ(e.vmm.chunk_bytes(1), 0x10000u);
  EXPECT_EQ(e.fds.size(), 3u);
  EXPECT_EQ(cuda.exported, 3);
  // A hole in the middle of the range: the walk stops with the runtime's error.
  cuda.allocations.erase(0x120000);
  EXPECT_EQ(code_of(cuda, 0x110000, 0x30000), ErrorCode::kInvalidArgument);
}

TEST(GpuBufferExport, HipVmmRangesSayTheyAreHip) {
  FakeGpuRuntime hip(GpuVendor::kHip, false);
  hip.allocations[0x200000] = 0x10000;
  const ExportedGpuBuffer e = export_gpu_buffer(hip, reinterpret_cast<void*>(0x200000), 0x10000);
  EXPECT_TRUE(e.vmm.hip());
  EXPECT_EQ(e.fds.size(), 1u);
}

struct FlagsFixture {
  std::vector<std::string> calls;
  std::vector<v1::RegisterIpcBuffer> registered;
  bool fail_allocation = false;
  FakeGpuRuntime* last_runtime = nullptr;  // the one the mapping made (it owns it)
  alignas(4096) std::byte segment[4096] = {};
  shm::StreamFlags* flags = reinterpret_cast<shm::StreamFlags*>(segment + 1024);

  StreamFlagsMapping mapping() {
    return StreamFlagsMapping(
        segment, sizeof(segment), flags, 8,
        [this](const v1::RegisterIpcBuffer& r) {
          calls.push_back("register");
          registered.push_back(r);
        },
        [this](GpuVendor vendor) {
          auto runtime = std::make_unique<FakeGpuRuntime>(vendor, true);
          last_runtime = runtime.get();
          runtime->calls = &calls;
          runtime->fail_allocation = fail_allocation;
          return runtime;
        });
  }
};

TEST(StreamFlags, FirstCallRegistersTheDoneFlagsBeforeEnqueuingAnything) {
  FlagsFixture f;
  {
    StreamFlagsMapping m = f.mapping();
    int stream = 0;
    std::byte own[16];
    m.enqueue_copy({&stream, GpuVendor::kHip}, own, own + 8, 8);
    m.enqueue_ready({&stream, GpuVendor::kHip}, 3, 7);
    m.enqueue_wait_done({&stream, GpuVendor::kHip}, 3, 7);
    m.release(3, 7);
    // Ready flag of slot 3: the segment's device address plus its offset in the segment.
    const uint64_t ready = 0x500000 + 1024 + 3 * sizeof(shm::StreamFlags);
    const uint64_t done = 0x900000 + 3 * sizeof(uint32_t);
    EXPECT_EQ(f.calls,
              (std::vector<std::string>{"relaxed {", "map_host", "allocate_flags", "register", "}",
                                        "copy 8", "write " + std::to_string(ready) + "=7",
                                        "wait " + std::to_string(done) + ">=7",
                                        "store " + std::to_string(done) + "=7"}));
    ASSERT_EQ(f.registered.size(), 1u);
    EXPECT_TRUE(f.registered[0].hip()) << "a HIP stream registers HIP memory";
    EXPECT_TRUE(f.registered[0].stream_done_flags());
    EXPECT_EQ(f.registered[0].buffer().bytes(), 8 * sizeof(uint32_t));
    f.calls.clear();
    m.enqueue_ready({&stream, GpuVendor::kHip}, 4, 1);
    EXPECT_EQ(f.calls.size(), 1u) << "set up once";
    try {
      m.enqueue_ready({&stream, GpuVendor::kCuda}, 5, 1);
      ADD_FAILURE() << "a CUDA stream was accepted by a client on HIP streams";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    }
    f.calls.clear();
  }
  EXPECT_EQ(f.calls, (std::vector<std::string>{"unmap_host", "free_flags"}));
}

TEST(StreamFlags, AFailedSetUpLeavesNothingAndTheNextCallTriesAgain) {
  FlagsFixture f;
  f.fail_allocation = true;
  StreamFlagsMapping m = f.mapping();
  int stream = 0;
  try {
    m.enqueue_ready({&stream, GpuVendor::kCuda}, 0, 1);
    ADD_FAILURE() << "set-up failure not reported";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
  EXPECT_EQ(f.calls, (std::vector<std::string>{"relaxed {", "map_host", "unmap_host", "}"}));
  m.release(0, 1);  // nothing registered: a no-op
  EXPECT_EQ(f.calls.size(), 4u);
  f.fail_allocation = false;
  f.calls.clear();
  m.enqueue_ready({&stream, GpuVendor::kCuda}, 0, 1);
  ASSERT_EQ(f.registered.size(), 1u);
  EXPECT_FALSE(f.registered[0].hip());
}

// A resume asks the done flag whether irisd finished a stream-ordered request before it died
// (the flag is written before the completion slot): reached means completed, never run again.
TEST(StreamFlags, DoneReachedReadsTheSlotsDoneFlag) {
  FlagsFixture f;
  StreamFlagsMapping m = f.mapping();
  EXPECT_FALSE(m.done_reached(2, 1)) << "no flags before first use";
  EXPECT_TRUE(f.calls.empty()) << "and nothing is set up to answer";
  int stream = 0;
  m.enqueue_ready({&stream, GpuVendor::kCuda}, 2, 5);
  const uint64_t done = 0x900000 + 2 * sizeof(uint32_t);
  f.calls.clear();
  f.last_runtime->flag_values[done] = 4;
  EXPECT_FALSE(m.done_reached(2, 5)) << "irisd had not written generation 5";
  f.last_runtime->flag_values[done] = 5;
  EXPECT_TRUE(m.done_reached(2, 5));
  EXPECT_FALSE(m.done_reached(3, 5)) << "another slot's flag";
  EXPECT_EQ(f.calls.front(), "load " + std::to_string(done));
}

// A stream-ordered call on a capturing stream becomes a graph plan: libiris enqueues only the
// plan's memory operations, with constant values (ready = 1; wait done >= 1; done = 0), and the
// set-up a first call makes runs outside capture's rules.
TEST(StreamFlags, AGraphPlanIsReadyOneWaitDoneOneThenResetDone) {
  FlagsFixture f;
  StreamFlagsMapping m = f.mapping();
  int stream = 0;
  const GpuStream on{&stream, GpuVendor::kCuda};
  EXPECT_FALSE(m.capturing(on));
  EXPECT_EQ(f.calls.front(), "relaxed {") << "set-up under capture must be allowed";
  f.last_runtime->capturing_now = true;
  EXPECT_TRUE(m.capturing(on));
  f.calls.clear();
  m.enqueue_graph_ready(on, 6);
  m.enqueue_graph_wait(on, 6);
  bool destroyed = false;
  m.on_graph_destroyed(on, [&] { destroyed = true; });
  const uint64_t ready = 0x500000 + 1024 + 6 * sizeof(shm::StreamFlags);
  const uint64_t done = 0x900000 + 6 * sizeof(uint32_t);
  EXPECT_EQ(f.calls,
            (std::vector<std::string>{
                "write " + std::to_string(ready) + "=1", "wait " + std::to_string(done) + ">=1",
                "write " + std::to_string(done) + "=0", "graph user object"}));
  EXPECT_FALSE(destroyed);
  f.last_runtime->graph_destroyed();
  EXPECT_TRUE(destroyed) << "the graph's destruction runs the release";
}

}  // namespace
}  // namespace iris
