// The hsa engine against the stand-in ROCm runtime (tests/support/hsa_stand_in.hpp): engine
// choice through the real engine, completion through pooled signals, the timeout on a lost
// signal, host memory addressed through the locked alias, HIP IPC imports cached per allocation,
// done-flag writes, and the fallback where ROCm lacks the on-engine copy.
#include "daemon/engines/hsa/hsa_engine.hpp"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <bit>
#include <chrono>
#include <cstring>
#include <numeric>
#include <set>
#include <thread>

#include "tests/support/hsa_stand_in.hpp"

namespace iris::daemon {
namespace {

using test::HsaStandIn;
using test::StandInNode;

// A node shaped like MI300X (see sdma_planner_test.cpp): host engines 0-1, two per xGMI link.
StandInNode mi300x_like(int gpus) {
  StandInNode node;
  node.gpus = gpus;
  node.available = [](int src, int dst) -> uint32_t {
    return src < 0 || dst < 0 ? 0b11u : 0xfffcu;
  };
  node.preferred = [](int src, int dst) -> uint32_t {
    if (src < 0 || dst < 0 || src == dst) return 0;
    const int link = dst < src ? dst : dst - 1;
    return 0b11u << (2 + 2 * link);
  };
  return node;
}

// Polls until `count` completions arrived or 5 s passed.
std::vector<CopyCompletion> drain(Engine& engine, std::size_t count) {
  std::vector<CopyCompletion> out;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (out.size() < count && std::chrono::steady_clock::now() < give_up) {
    if (engine.poll(out) == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return out;
}

void fill(std::byte* p, std::size_t bytes, uint8_t seed) {
  for (std::size_t i = 0; i < bytes; ++i) p[i] = static_cast<std::byte>(seed + i * 7);
}

DeviceBufferExport hip_export(const HsaStandIn& rocm, const std::byte* allocation, int device,
                              uint64_t offset, uint64_t bytes) {
  return {DeviceApi::kHip, rocm.ipc_handle(allocation), rocm.bus_id(device), offset, bytes, {}, {}};
}

TEST(HsaEngine, DescribesAgentsLinksAndEnginesPerPair) {
  HsaStandIn rocm(mi300x_like(8));
  HsaEngine engine(rocm.hsa(), &rocm.hip(), {}, "test");
  const EngineDescription& d = engine.description();
  EXPECT_EQ(d.name, "hsa");
  EXPECT_NE(d.copy_method.find("hsa_amd_memory_async_copy_on_engine"), std::string::npos);
  EXPECT_NE(d.driver_version.find("HIP 6.2"), std::string::npos) << d.driver_version;
  ASSERT_EQ(d.devices.size(), 8u);
  const DeviceDescription& gpu0 = d.devices[0];
  EXPECT_EQ(gpu0.bus_id, "0000:0c:00.0");
  EXPECT_NE(gpu0.name.find("gfx942"), std::string::npos);
  EXPECT_EQ(gpu0.engines.size(), 16u);
  EXPECT_EQ(gpu0.peer_bus_ids.size(), 7u);
  ASSERT_EQ(gpu0.links.size(), 8u);  // host + 7 peers
  EXPECT_EQ(gpu0.links[0].bus_id, "host");
  EXPECT_EQ(gpu0.links[0].engines, (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(gpu0.links[1].bus_id, "0000:1c:00.0");
  EXPECT_EQ(gpu0.links[1].type, "xgmi");
  EXPECT_EQ(gpu0.links[1].engines, (std::vector<uint32_t>{2, 3}));
  EXPECT_EQ(gpu0.links[7].engines, (std::vector<uint32_t>{14, 15}));
}

TEST(HsaEngine, PeerCopiesRunOnTheirLinksEnginesAndLand) {
  HsaStandIn rocm(mi300x_like(8));
  HsaEngine engine(rocm.hsa(), &rocm.hip(), {}, "test");
  constexpr std::size_t kBytes = 1 << 20;
  std::byte* src = rocm.gpu_alloc(0, kBytes);
  fill(src, kBytes, 3);
  std::vector<CopyRequest> copies;
  std::vector<std::byte*> dsts;
  for (int peer = 1; peer < 8; ++peer) {
    dsts.push_back(rocm.gpu_alloc(peer, kBytes));
    copies.push_back({src, dsts.back(), kBytes, static_cast<uint64_t>(peer), 0, peer});
  }
  engine.submit(copies);
  const auto done = drain(engine, copies.size());
  ASSERT_EQ(done.size(), copies.size());
  for (const CopyCompletion& c : done) {
    EXPECT_EQ(c.code, ErrorCode::kOk);
    EXPECT_EQ(c.path, TransferPath::kCopyEngine);
    EXPECT_EQ(c.bytes, kBytes);
  }
  for (std::byte* d : dsts) EXPECT_EQ(std::memcmp(d, src, kBytes), 0);
  std::set<uint32_t> engines;
  for (const test::StandInCopy& c : rocm.copies()) {
    EXPECT_TRUE(c.forced_sdma);
    const int link = c.dst_device - 1;
    EXPECT_NE(c.engine & (0b11u << (2 + 2 * link)), 0u) << "copy to GPU " << c.dst_device;
    engines.insert(c.engine);
  }
  EXPECT_EQ(engines.size(), 7u);
  EXPECT_FALSE(engine.needs_polling());
  EXPECT_EQ(engine.planner().queued_bytes(0, 2), 0u);
}

TEST(HsaEngine, ReducedEngineSetIsRespectedSoNoCopyHangs) {
  // MI308X-like: engines 5..15 are counted but not offered; the stand-in hangs a copy queued on
  // one, as a queue on a fused-off engine does.
  StandInNode node;
  node.gpus = 4;
  node.available = [](int src, int dst) -> uint32_t { return src < 0 || dst < 0 ? 1u : 0b11110u; };
  HsaStandIn rocm(node);
  HsaEngine engine(rocm.hsa(), &rocm.hip(), {}, "test");
  std::vector<CopyRequest> copies;
  std::vector<std::byte*> keep;
  for (int round = 0; round < 20; ++round)
    for (int s = 0; s < 4; ++s)
      for (int d = 0; d < 4; ++d) {
        if (s == d) continue;
        keep.push_back(rocm.gpu_alloc(s, 4096));
        keep.push_back(rocm.gpu_alloc(d, 4096));
        copies.push_back({keep[keep.size() - 2], keep.back(), 4096, copies.size(), s, d});
      }
  engine.submit(copies);
  EXPECT_EQ(drain(engine, copies.size()).size(), copies.size());
  EXPECT_EQ(rocm.hung_copies(), 0);
  for (const test::StandInCopy& c : rocm.copies()) EXPECT_EQ(c.engine & ~0b11110u, 0u);
}

TEST(HsaEngine, LargeCopiesSplitAcrossEnginesCompleteOnce) {
  HsaStandIn rocm(mi300x_like(2));
  EngineOptions options;
  options.split_bytes = 1 << 20;
  HsaEngine engine(rocm.hsa(), &rocm.hip(), options, "test");
  constexpr std::size_t kBytes = (4 << 20) + 100;
  std::byte* src = rocm.gpu_alloc(0, kBytes);
  std::byte* dst = rocm.gpu_alloc(1, kBytes);
  fill(src, kBytes, 9);
  const CopyRequest copy{src, dst, kBytes, 77, 0, 1};
  engine.submit({&copy, 1});
  const auto done = drain(engine, 1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].cookie, 77u);
  EXPECT_EQ(done[0].bytes, kBytes);
  EXPECT_EQ(rocm.copies().size(), 2u) << "one piece per engine of the link";
  rocm.wait_idle();
  std::vector<CopyCompletion> more;
  engine.poll(more);
  EXPECT_TRUE(more.empty()) << "a split copy completes once";
  EXPECT_EQ(std::memcmp(src, dst, kBytes), 0);
}

TEST(HsaEngine, SignalsComeFromAPool) {
  HsaStandIn rocm(mi300x_like(2));
  HsaEngine engine(rocm.hsa(), &rocm.hip(), {}, "test");
  std::byte* src = rocm.gpu_alloc(0, 64);
  std::byte* dst = rocm.gpu_alloc(1, 64);
  for (int i = 0; i < 1000; ++i) {
    const CopyRequest copy{src, dst, 64, static_cast<uint64_t>(i), 0, 1};
    engine.submit({&copy, 1});
    ASSERT_EQ(drain(engine, 1).size(), 1u);
  }
  EXPECT_LE(engine.signals_created(), 64u);
  EXPECT_EQ(rocm.signals_alive(), static_cast<int>(engine.signals_created()));
}

TEST(HsaEngine, ALostSignalFailsItsCopyAfterTheTimeoutAndTheSignalIsReusedOnceItLands) {
  HsaStandIn rocm(mi300x_like(2));
  EngineOptions options;
  options.copy_timeout_ms = 50;
  HsaEngine engine(rocm.hsa(), &rocm.hip(), options, "test");
  std::byte* src = rocm.gpu_alloc(0, 4096);
  std::byte* dst = rocm.gpu_alloc(1, 4096);
  rocm.lose_next_signals(1);
  const std::vector<CopyRequest> copies{{src, dst, 4096, 1, 0, 1}, {src, dst, 4096, 2, 0, 1}};
  engine.submit(copies);
  const auto done = drain(engine, 2);
  ASSERT_EQ(done.size(), 2u);
  int failed = 0;
  for (const CopyCompletion& c : done) failed += c.code == ErrorCode::kEngineError;
  EXPECT_EQ(failed, 1) << "only the copy whose signal was lost fails";
  EXPECT_FALSE(engine.needs_polling()) << "nothing left to wait for: no hang";
  EXPECT_EQ(engine.signals_quarantined(), 1u);
  rocm.signal_lost_copies();
  std::vector<CopyCompletion> none;
  engine.poll(none);
  EXPECT_TRUE(none.empty()) << "a late completion is not reported twice";
  EXPECT_EQ(engine.signals_quarantined(), 0u);
}

TEST(HsaEngine, HostMemoryIsLockedAndCopiedThroughTheAgentAddress) {
  HsaStandIn rocm(mi300x_like(2));
  HsaEngine engine(rocm.hsa(), &rocm.hip(), {}, "test");
  std::vector<std::byte> host(8192);
  fill(host.data(), 4096, 5);
  std::byte* gpu = rocm.gpu_alloc(1, 4096);
  {
    auto pinned = engine.prepare_host_memory(host.data(), host.size());
    EXPECT_EQ(rocm.locked_ranges(), 1);
    const std::vector<CopyRequest> copies{{host.data(), gpu, 4096, 1, kHostMemory, 1},
                                          {gpu, host.data() + 4096, 4096, 2, 1, kHostMemory}};
    engine.submit(copies);
    const auto done = drain(engine, 2);
    ASSERT_EQ(done.size(), 2u);
    for (const CopyCompletion& c : done) EXPECT_EQ(c.code, ErrorCode::kOk);
    for (const test::StandInCopy& c : rocm.copies()) EXPECT_EQ(c.engine & ~0b11u, 0u);
  }
  EXPECT_EQ(rocm.locked_ranges(), 0) << "unlocked with the last user";
  EXPECT_EQ(std::memcmp(host.data(), host.data() + 4096, 4096), 0);
}

TEST(HsaEngine, UnlockedHostMemoryFailsItsCopyWithoutHanging) {
  HsaStandIn rocm(mi300x_like(2));
  HsaEngine engine(rocm.hsa(), &rocm.hip(), {}, "test");
  std::vector<std::byte> host(4096);
  std::byte* gpu = rocm.gpu_alloc(0, 4096);
  const CopyRequest copy{host.data(), gpu, 4096, 1, kHostMemory, 0};
  engine.submit({&copy, 1});
  const auto done = drain(engine, 1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].code, ErrorCode::kEngineError);
}

TEST(HsaEngine, HipBuffersAreImportedOncePerAllocationAndClosedWithTheLastUser) {
  HsaStandIn rocm(mi300x_like(2));
  HsaEngine engine(rocm.hsa(), &rocm.hip(), {}, "test");
  std::byte* allocation = rocm.gpu_alloc(1, 1 << 20);
  {
    const ImportedMemory a = engine.import_device_memory(hip_export(rocm, allocation, 1, 0, 4096));
    const ImportedMemory b =
        engine.import_device_memory(hip_export(rocm, allocation, 1, 65536, 1000));
    EXPECT_EQ(rocm.ipc_opens(), 1);
    EXPECT_EQ(a.device, 1);
    EXPECT_EQ(a.base, allocation);
    EXPECT_EQ(b.base, allocation + 65536);
    EXPECT_EQ(b.bytes, 1000u);
  }
  EXPECT_EQ(rocm.ipc_closes(), 1);
  auto code_of = [&](const DeviceBufferExport& e) {
    try {
      engine.import_device_memory(e);
    } catch (const Error& err) {
      return err.code();
    }
    return ErrorCode::kOk;
  };
  EXPECT_EQ(code_of(hip_export(rocm, allocation, 1, (1 << 20) - 10, 11)), ErrorCode::kOutOfRange);
  DeviceBufferExport cuda = hip_export(rocm, allocation, 1, 0, 16);
  cuda.api = DeviceApi::kCuda;
  EXPECT_EQ(code_of(cuda), ErrorCode::kInvalidArgument);
  DeviceBufferExport unknown_gpu = hip_export(rocm, allocation, 1, 0, 16);
  unknown_gpu.bus_id = "0000:ff:00.0";
  EXPECT_EQ(code_of(unknown_gpu), ErrorCode::kNotFound);
  DeviceBufferExport garbage = hip_export(rocm, allocation, 1, 0, 16);
  garbage.ipc_handle[0] ^= 1;
  EXPECT_EQ(code_of(garbage), ErrorCode::kInvalidArgument);
  garbage.ipc_handle.resize(3);
  EXPECT_EQ(code_of(garbage), ErrorCode::kInvalidArgument);
  HsaEngine without_hip(rocm.hsa(), nullptr, {}, "test");
  try {
    without_hip.import_device_memory(hip_export(rocm, allocation, 1, 0, 16));
    FAIL() << "imported without a HIP runtime";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
    EXPECT_NE(std::string(e.what()).find("libamdhip64"), std::string::npos);
  }
}

TEST(HsaEngine, VmmBuffersAreMappedBackToBackAndCopied) {
  HsaStandIn rocm(mi300x_like(2));
  HsaEngine engine(rocm.hsa(), &rocm.hip(), {}, "test");
  // Two 64 KiB "physical allocations" as file descriptors, as hipMemExportToShareableHandle
  // gives them, holding a pattern that runs across the boundary.
  constexpr std::size_t kChunk = 64 << 10;
  std::vector<std::byte> pattern(2 * kChunk);
  fill(pattern.data(), pattern.size(), 11);
  int fds[2];
  for (int i = 0; i < 2; ++i) {
    fds[i] = ::memfd_create("vmm", MFD_CLOEXEC);
    ASSERT_GE(fds[i], 0);
    ASSERT_EQ(::pwrite(fds[i], pattern.data() + i * kChunk, kChunk, 0), ssize_t{kChunk});
  }
  const DeviceBufferExport exported{
      DeviceApi::kHip, "", rocm.bus_id(1), 100, 100000, {fds[0], fds[1]}, {kChunk, kChunk}};
  {
    const ImportedMemory vmm = engine.import_device_memory(exported);
    EXPECT_EQ(vmm.device, 1);
    EXPECT_EQ(vmm.bytes, 100000u);
    EXPECT_EQ(std::memcmp(vmm.base, pattern.data() + 100, 100000), 0);
    std::byte* dst = rocm.gpu_alloc(0, 100000);
    const CopyRequest copy{vmm.base, dst, 100000, 1, 1, 0};
    engine.submit({&copy, 1});
    const auto done = drain(engine, 1);
    ASSERT_EQ(done.size(), 1u);
    EXPECT_EQ(done[0].code, ErrorCode::kOk);
    EXPECT_EQ(std::memcmp(dst, pattern.data() + 100, 100000), 0);
    EXPECT_EQ(rocm.vmm_ranges(), 1);
  }
  EXPECT_EQ(rocm.vmm_ranges(), 0) << "unmapped and freed with the last user";
  auto code_of = [&](DeviceBufferExport e) {
    try {
      engine.import_device_memory(e);
    } catch (const Error& err) {
      return err.code();
    }
    return ErrorCode::kOk;
  };
  DeviceBufferExport bad = exported;
  bad.vmm_chunk_bytes.pop_back();
  EXPECT_EQ(code_of(bad), ErrorCode::kInvalidArgument) << "two descriptors, one size";
  bad = exported;
  bad.offset = 2 * kChunk - 10;
  EXPECT_EQ(code_of(bad), ErrorCode::kOutOfRange);
  bad = exported;
  bad.vmm_chunk_bytes[1] = UINT64_MAX;
  EXPECT_EQ(code_of(bad), ErrorCode::kInvalidArgument) << "sizes overflow";
  EXPECT_EQ(rocm.vmm_ranges(), 0) << "nothing left reserved by the refusals";
  for (int fd : fds) ::close(fd);
}

TEST(HsaEngine, DoneFlagWritesLandInGpuMemory) {
  HsaStandIn rocm(mi300x_like(2));
  HsaEngine engine(rocm.hsa(), &rocm.hip(), {}, "test");
  auto* flags = reinterpret_cast<uint32_t*>(rocm.gpu_alloc(1, 4096));
  for (uint32_t slot = 0; slot < 2000; ++slot)
    engine.write_device_word(1, reinterpret_cast<std::byte*>(flags + slot % 1024), slot + 1);
  rocm.wait_idle();
  std::vector<CopyCompletion> out;
  engine.poll(out);
  EXPECT_TRUE(out.empty()) << "flag writes are not copy completions";
  EXPECT_FALSE(engine.needs_polling());
  for (uint32_t slot = 0; slot < 1024; ++slot)
    EXPECT_EQ(flags[slot], slot < 2000 - 1024 ? slot + 1024 + 1 : slot + 1) << "slot " << slot;
}

TEST(HsaEngine, WithoutTheOnEngineCopyTheRuntimeChoosesAndStatusSaysSo) {
  StandInNode node = mi300x_like(2);
  node.copy_on_engine = false;  // Debian 12's ROCm 5.2.3
  HsaStandIn rocm(node);
  HsaEngine engine(rocm.hsa(), &rocm.hip(), {}, "test");
  EXPECT_NE(engine.description().copy_method.find("ROCm 5.6"), std::string::npos);
  std::byte* src = rocm.gpu_alloc(0, 4096);
  std::byte* dst = rocm.gpu_alloc(1, 4096);
  std::byte* same = rocm.gpu_alloc(0, 4096);
  const std::vector<CopyRequest> copies{{src, dst, 4096, 1, 0, 1}, {src, same, 4096, 2, 0, 0}};
  engine.submit(copies);
  const auto done = drain(engine, 2);
  ASSERT_EQ(done.size(), 2u);
  for (const CopyCompletion& c : done)
    EXPECT_EQ(c.path, c.cookie == 1 ? TransferPath::kCopyEngine : TransferPath::kComputeUnits)
        << "the runtime runs same-GPU copies as blit kernels unless forced onto SDMA";
  for (const test::StandInCopy& c : rocm.copies()) EXPECT_EQ(c.engine, 0u);
}

}  // namespace
}  // namespace iris::daemon
