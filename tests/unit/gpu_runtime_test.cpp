// export_gpu_buffer over a fake GpuRuntime: an IPC-able allocation gives one handle and the
// range; VMM memory is walked allocation by allocation, one file descriptor each; ranges that
// do not fit give errors.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <map>

#include "client/src/gpu_runtime.hpp"
#include "iris/error.hpp"

namespace iris {
namespace {

class FakeRuntime final : public GpuRuntime {
 public:
  FakeRuntime(GpuVendor vendor, bool ipc) : vendor_(vendor), ipc_(ipc) {}
  std::map<uintptr_t, std::size_t> allocations;  // base -> bytes
  int exported = 0;

  GpuVendor vendor() const override { return vendor_; }
  std::string bus_id_of(const void*) override { return "0000:0c:00.0"; }
  std::pair<uintptr_t, std::size_t> allocation_of(uintptr_t ptr) override {
    for (const auto& [base, bytes] : allocations)
      if (ptr >= base && ptr < base + bytes) return {base, bytes};
    throw Error(ErrorCode::kInvalidArgument, "no allocation there");
  }
  std::optional<std::string> ipc_handle(uintptr_t allocation) override {
    if (!ipc_) return std::nullopt;
    return "handle-" + std::to_string(allocation);
  }
  int export_fd(uintptr_t) override {
    ++exported;
    return ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  }
  uint64_t map_host(void*, std::size_t) override { return 0; }
  void unmap_host(void*) override {}
  uint64_t allocate_flags(std::size_t) override { return 0; }
  void free_flags(uint64_t) override {}
  void store_flag(uint64_t, uint32_t) override {}
  void write_value(void*, uint64_t, uint32_t) override {}
  void wait_value_geq(void*, uint64_t, uint32_t) override {}

 private:
  GpuVendor vendor_;
  bool ipc_;
};

ErrorCode code_of(GpuRuntime& runtime, uintptr_t ptr, std::size_t bytes) {
  try {
    export_gpu_buffer(runtime, reinterpret_cast<void*>(ptr), bytes);
  } catch (const Error& e) {
    return e.code();
  }
  return ErrorCode::kOk;
}

TEST(GpuBufferExport, IpcAllocationGivesOneHandleAndTheRange) {
  FakeRuntime hip(GpuVendor::kHip, true);
  hip.allocations[0x10000] = 0x4000;
  const ExportedGpuBuffer e = export_gpu_buffer(hip, reinterpret_cast<void*>(0x10100), 0x200);
  ASSERT_TRUE(e.ipc);
  EXPECT_EQ(e.ipc->handle(), "handle-65536");
  EXPECT_EQ(e.ipc->offset(), 0x100u);
  EXPECT_EQ(e.ipc->bytes(), 0x200u);
  EXPECT_EQ(e.ipc->bus_id(), "0000:0c:00.0");
  EXPECT_TRUE(e.fds.empty());
  EXPECT_TRUE(register_request(GpuVendor::kHip, *e.ipc).has_hip_ipc());
  EXPECT_TRUE(register_request(GpuVendor::kCuda, *e.ipc).has_cuda_ipc());
  EXPECT_EQ(code_of(hip, 0x13f00, 0x200), ErrorCode::kOutOfRange) << "past the allocation";
  EXPECT_EQ(code_of(hip, 0x10000, 0), ErrorCode::kOutOfRange) << "empty";
}

TEST(GpuBufferExport, VmmRangeIsWalkedAllocationByAllocation) {
  FakeRuntime cuda(GpuVendor::kCuda, false);
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
  FakeRuntime hip(GpuVendor::kHip, false);
  hip.allocations[0x200000] = 0x10000;
  const ExportedGpuBuffer e = export_gpu_buffer(hip, reinterpret_cast<void*>(0x200000), 0x10000);
  EXPECT_TRUE(e.vmm.hip());
  EXPECT_EQ(e.fds.size(), 1u);
}

}  // namespace
}  // namespace iris
