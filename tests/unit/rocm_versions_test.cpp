// ROCm releases differ where the hsa engine and libiris's HIP side meet the runtime (issue:
// "the hsa engine on a real ROCm 6.x node"). irisd is built against Debian's ROCm 5.2.3 headers
// and decides each difference from the runtime it loaded; the stand-in ROCm behaves as the
// release it is told to be, so each test here fails where a call is made the wrong way.
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "client/gpu/gpu_runtime.hpp"
#include "daemon/engines/hsa/hsa_engine.hpp"
#include "iris/shared/rocm_library.hpp"
#include "tests/support/hsa_stand_in.hpp"

namespace iris::daemon {
namespace {

using test::HsaStandIn;
using test::StandInNode;

constexpr int kRocm52 = 50200000, kRocm62 = 60200000, kRocm70 = 70000000, kRocm71 = 70100000;

StandInNode node_of(int hip_version) {
  StandInNode node;
  node.gpus = 2;
  node.hip_version = hip_version;
  return node;
}

TEST(HipBehaviour, DecidedByTheRuntimeVersion) {
  EXPECT_EQ(hip::behaviour_of(kRocm52).ipc_lazy_peer_access_flag, 0u);
  EXPECT_EQ(hip::behaviour_of(kRocm62).ipc_lazy_peer_access_flag, 1u);
  EXPECT_FALSE(hip::behaviour_of(kRocm52).import_fd_by_pointer);
  EXPECT_TRUE(hip::behaviour_of(kRocm62).import_fd_by_pointer);
  EXPECT_TRUE(hip::behaviour_of(kRocm70).import_fd_by_pointer);
  EXPECT_FALSE(hip::behaviour_of(kRocm71).import_fd_by_pointer);
  EXPECT_TRUE(hip::behaviour_of(kRocm52).retain_takes_reference);
  EXPECT_FALSE(hip::behaviour_of(kRocm62).retain_takes_reference);
  EXPECT_EQ(hip::behaviour_of(60201234).text, "6.2.1234");
}

// hipIpcMemLazyEnablePeerAccess is 0 in the 5.x headers irisd is built with and 0x1 from 6.0;
// CLR 6.x refuses any other flag value.
class IpcOpenFlag : public ::testing::TestWithParam<int> {};
TEST_P(IpcOpenFlag, HipMallocBuffersImportOnEveryRelease) {
  HsaStandIn rocm(node_of(GetParam()));
  HsaEngine engine(rocm.hsa(), &rocm.hip(), {}, "test");
  std::byte* allocation = rocm.gpu_alloc(1, 1 << 20);
  const DeviceBufferExport exported{
      DeviceApi::kHip, rocm.ipc_handle(allocation), rocm.bus_id(1), 0, 4096, {}, {}};
  const ImportedMemory imported = engine.import_device_memory(exported);
  EXPECT_EQ(imported.base, allocation);
}
INSTANTIATE_TEST_SUITE_P(Releases, IpcOpenFlag, ::testing::Values(kRocm52, kRocm62, kRocm71));

// hipMemImportFromShareableHandle reads the fd through a pointer in 6.0 to 7.0 and by value
// elsewhere; and ROCr unmaps one mapping per call, so an import of several allocations is
// unmapped allocation by allocation.
class VmmImport : public ::testing::TestWithParam<int> {};
TEST_P(VmmImport, MapsAndUnmapsEveryAllocationOnEveryRelease) {
  HsaStandIn rocm(node_of(GetParam()));
  HsaEngine engine(rocm.hsa(), &rocm.hip(), {}, "test");
  constexpr std::size_t kChunk = 64 << 10;
  int fds[3];
  for (int& fd : fds) {
    fd = ::memfd_create("vmm", MFD_CLOEXEC);
    ASSERT_EQ(::ftruncate(fd, kChunk), 0);
  }
  ASSERT_EQ(::pwrite(fds[2], "tail", 4, 0), 4);
  const DeviceBufferExport exported{
      DeviceApi::kHip,         "", rocm.bus_id(0), 0, 3 * kChunk, {fds[0], fds[1], fds[2]},
      {kChunk, kChunk, kChunk}};
  {
    const ImportedMemory vmm = engine.import_device_memory(exported);
    EXPECT_EQ(std::memcmp(vmm.base + 2 * kChunk, "tail", 4), 0);
    EXPECT_EQ(rocm.vmm_mappings(), 3);
  }
  EXPECT_EQ(rocm.crashes(), 0) << "an fd was passed where this release reads a pointer";
  EXPECT_EQ(rocm.vmm_mappings(), 0) << "allocations left mapped: the exporter's VRAM is held";
  EXPECT_EQ(rocm.vmm_ranges(), 0);
  for (int fd : fds) ::close(fd);
}
INSTANTIATE_TEST_SUITE_P(Releases, VmmImport,
                         ::testing::Values(kRocm52, kRocm62, kRocm70, kRocm71));

// libiris's export of VMM memory (PyTorch's expandable segments on ROCm): from 6.0 the retain
// takes no reference while the release drops one, so releasing after it would free memory the
// training process still maps.
class VmmExport : public ::testing::TestWithParam<int> {};
TEST_P(VmmExport, LeavesTheOwnersAllocationAlive) {
  HsaStandIn rocm(node_of(GetParam()));
  std::byte* allocation = rocm.vmm_alloc(0, 1 << 16);
  const auto runtime = make_hip_runtime(rocm.hip());
  const int fd = runtime->export_fd(reinterpret_cast<uintptr_t>(allocation));
  EXPECT_GE(fd, 0);
  ::close(fd);
  EXPECT_TRUE(rocm.vmm_alive(allocation)) << "the export freed memory its owner still maps";
}
INSTANTIATE_TEST_SUITE_P(Releases, VmmExport, ::testing::Values(kRocm52, kRocm62, kRocm71));

// Collectives in HIP graphs are not supported yet: a capturing HIP stream is recognised and the
// capture refused with the reason, never captured half-way.
TEST(HipGraphs, ACapturingStreamIsRefusedWithTheReason) {
  HsaStandIn rocm(node_of(kRocm62));
  const auto runtime = make_hip_runtime(rocm.hip());
  EXPECT_TRUE(runtime->capturing(HsaStandIn::capturing_stream()));
  EXPECT_FALSE(runtime->capturing(reinterpret_cast<void*>(0x1234)));
  try {
    runtime->check_capture_supported();
    ADD_FAILURE() << "a HIP capture was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
    EXPECT_NE(e.message().find("HIP graphs"), std::string::npos) << e.message();
  }
}

TEST(HsaSignals, PooledSignalsAreGpuOnlyNotInterrupts) {
  HsaStandIn rocm(node_of(kRocm62));
  HsaEngine engine(rocm.hsa(), &rocm.hip(), {}, "test");
  std::byte* a = rocm.gpu_alloc(0, 4096);
  std::byte* b = rocm.gpu_alloc(1, 4096);
  const CopyRequest copy{a, b, 4096, 1, 0, 1};
  engine.submit({&copy, 1});
  rocm.wait_idle();
  std::vector<CopyCompletion> done;
  for (int i = 0; i < 1000 && done.empty(); ++i) engine.poll(done);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_GT(rocm.gpu_only_signals(), 0);
  EXPECT_EQ(rocm.interrupt_signals(), 0) << "irisd polls its signals: no interrupt is needed";
}

// HSA_ENABLE_SDMA=0 or HSA_ENABLE_PEER_SDMA=0 turn on-engine copies into blit kernels without a
// word: irisd refuses to run the hsa engine so, and status shows both variables.
TEST(HsaEnvironment, SdmaSwitchedOffIsRefusedAndStatusShowsTheVariables) {
  test::HsaStandIn rocm(node_of(kRocm62));
  for (const char* variable : {"HSA_ENABLE_SDMA", "HSA_ENABLE_PEER_SDMA"}) {
    ::setenv(variable, "0", 1);
    try {
      HsaEngine engine(rocm.hsa(), &rocm.hip(), {}, "test");
      ADD_FAILURE() << variable << "=0 was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
      EXPECT_NE(std::string(e.what()).find(variable), std::string::npos) << e.what();
    }
    ::unsetenv(variable);
  }
  HsaEngine engine(rocm.hsa(), &rocm.hip(), {}, "test");
  EXPECT_NE(
      engine.description().copy_method.find("HSA_ENABLE_SDMA=unset, HSA_ENABLE_PEER_SDMA=unset"),
      std::string::npos)
      << engine.description().copy_method;
}

// The engine status has no answer for a GPU to itself (INVALID_AGENT): same-GPU copies must
// still go to one of that GPU's SDMA engines, forced, and count as copy-engine bytes.
TEST(HsaSameGpu, CopiesWithinOneGpuRunOnItsSdmaEngines) {
  test::HsaStandIn rocm(node_of(kRocm62));
  HsaEngine engine(rocm.hsa(), &rocm.hip(), {}, "test");
  std::byte* a = rocm.gpu_alloc(1, 1 << 16);
  std::byte* b = rocm.gpu_alloc(1, 1 << 16);
  const CopyRequest copy{a, b, 1 << 16, 7, 1, 1};
  engine.submit({&copy, 1});
  rocm.wait_idle();
  std::vector<CopyCompletion> done;
  for (int i = 0; i < 1000 && done.empty(); ++i) engine.poll(done);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].path, TransferPath::kCopyEngine);
  const auto copies = rocm.copies();
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_NE(copies[0].engine, 0u) << "left to the runtime, which runs a blit kernel";
  EXPECT_TRUE(copies[0].forced_sdma);
}

// Without the manual ld.so.conf step of a ROCm install the loader finds nothing: the loaders try
// $ROCM_PATH/lib and /opt/rocm/lib first, every soname (ROCm 7's libamdhip64.so.7 too).
TEST(RocmLibraries, SearchedUnderRocmPathOptRocmThenTheLoadersPath) {
  EXPECT_EQ(rocm_library_candidates("/opt/rocm-6.2.0", {"libamdhip64.so.7", "libamdhip64.so.6"}),
            (std::vector<std::string>{"/opt/rocm-6.2.0/lib/libamdhip64.so.7",
                                      "/opt/rocm/lib/libamdhip64.so.7", "libamdhip64.so.7",
                                      "/opt/rocm-6.2.0/lib/libamdhip64.so.6",
                                      "/opt/rocm/lib/libamdhip64.so.6", "libamdhip64.so.6"}));
  EXPECT_EQ(
      rocm_library_candidates(nullptr, {"libhsa-runtime64.so.1"}),
      (std::vector<std::string>{"/opt/rocm/lib/libhsa-runtime64.so.1", "libhsa-runtime64.so.1"}));
}

// IPC moved to dma-buf in ROCr 6.1: a client on a ROCm before it (a PyTorch wheel bundling its
// own) cannot share memory with irisd on one after it, or the other way round.
TEST(RocmMismatch, ImportsAcrossTheDmaBufChangeAreRefusedNamingBothVersions) {
  test::HsaStandIn rocm(node_of(kRocm62));
  HsaEngine engine(rocm.hsa(), &rocm.hip(), {}, "test");
  std::byte* allocation = rocm.gpu_alloc(1, 1 << 20);
  DeviceBufferExport exported{
      DeviceApi::kHip, rocm.ipc_handle(allocation), rocm.bus_id(1), 0, 4096, {}, {}, 60000000};
  try {
    engine.import_device_memory(exported);
    ADD_FAILURE() << "a ROCm 6.0 export was imported by irisd on ROCm 6.2";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("HIP 6.0.0 and irisd HIP 6.2.0"), std::string::npos)
        << e.what();
  }
  exported.runtime_version = 60100000;  // across releases after the change: works
  EXPECT_EQ(engine.import_device_memory(exported).base, allocation);
}

// A GPU memory fault would abort irisd (ROCr's default): the engine registers a handler, fails
// the copy the fault hit at once and serves the rest. A copy reported failed before its DMA let
// go keeps its memory mapped until it really ended.
TEST(HsaFaults, AFaultFailsTheCopyItHitAndItsMemoryOutlivesTheDma) {
  test::HsaStandIn rocm(node_of(kRocm62));
  HsaEngine engine(rocm.hsa(), &rocm.hip(), {}, "test");
  std::byte* src = rocm.gpu_alloc(0, 4096);
  std::byte* dst = rocm.gpu_alloc(1, 4096);
  std::byte* other = rocm.gpu_alloc(1, 4096);
  bool released = false;
  auto owner = std::shared_ptr<const void>(dst, [&](const void*) { released = true; });
  rocm.lose_next_signals(1);  // the faulting copy never signals
  CopyRequest faulting{src, dst, 4096, 1, 0, 1};
  faulting.dst_owner = owner;
  const CopyRequest healthy{src, other, 4096, 2, 0, 1};
  engine.submit({&faulting, 1});
  engine.submit({&healthy, 1});
  owner.reset();  // the scheduler lets go once the copy is reported
  faulting.dst_owner.reset();
  rocm.wait_idle();
  rocm.inject_memory_fault(1, dst + 100);
  EXPECT_EQ(rocm.crashes(), 0) << "no handler: the fault would have killed irisd";
  std::vector<CopyCompletion> done;
  for (int i = 0; i < 1000 && done.size() < 2; ++i) engine.poll(done);
  ASSERT_EQ(done.size(), 2u) << "the faulting copy waited for its timeout";
  for (const CopyCompletion& c : done)
    EXPECT_EQ(c.code, c.cookie == 1 ? ErrorCode::kEngineError : ErrorCode::kOk) << c.cookie;
  EXPECT_FALSE(released) << "memory let go while the DMA may still write it";
  rocm.signal_lost_copies();  // the DMA ends late
  engine.poll(done);
  EXPECT_TRUE(released);
}

// A fake KFD topology: a CPU node and the stand-in's GPUs (bus 0c, 1c, ...), each GPU-to-GPU
// io_link with a recommended engine mask.
std::string fake_topology(const std::map<std::pair<int, int>, uint32_t>& masks, int gpus) {
  char dir[] = "/tmp/iris-kfd-XXXXXX";
  const std::string root = ::mkdtemp(dir);
  auto write = [](const std::string& path, const std::string& text) {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path) << text;
  };
  write(root + "/nodes/0/properties", "cpu_cores_count 64\ngpu_id 0\n");
  for (int g = 0; g < gpus; ++g) {
    const int node = g + 1;
    write(root + "/nodes/" + std::to_string(node) + "/properties",
          "gpu_id " + std::to_string(1000 + g) + "\nlocation_id " +
              std::to_string((0x0c + 0x10 * g) << 8) + "\ndomain 0\n");
    int link = 0;
    for (const auto& [pair, mask] : masks) {
      if (pair.first != g) continue;
      write(root + "/nodes/" + std::to_string(node) + "/io_links/" + std::to_string(link++) +
                "/properties",
            "type 11\nnode_from " + std::to_string(node) + "\nnode_to " +
                std::to_string(pair.second + 1) + "\nrecommended_sdma_engine_id_mask " +
                std::to_string(mask) + "\n");
    }
  }
  return root;
}

// The status mask means "free now": on an idle MI300X every peer is offered every xGMI engine.
// The engines wired to a link come from KFD's topology; copies stay on them, and a large copy is
// split across them only, not across every engine the status offered.
TEST(HsaRecommendedEngines, CopiesStayOnTheirLinksRecommendedEngines) {
  StandInNode node = node_of(kRocm62);
  node.available = [](int, int) { return 0xFFFCu; };  // "all 14 xGMI engines free"
  test::HsaStandIn rocm(node);
  EngineOptions options;
  options.split_bytes = 1 << 16;
  options.kfd_topology = fake_topology({{{0, 1}, 0b100000}, {{1, 0}, 0b1000000}}, 2);
  HsaEngine engine(rocm.hsa(), &rocm.hip(), options, "test");
  std::byte* a = rocm.gpu_alloc(0, 1 << 20);
  std::byte* b = rocm.gpu_alloc(1, 1 << 20);
  const CopyRequest copies[] = {
      {a, b, 1 << 20, 1, 0, 1}, {b, a, 1 << 20, 2, 1, 0}, {a, b, 1 << 18, 3, 0, 1}};
  engine.submit(copies);
  rocm.wait_idle();
  std::vector<CopyCompletion> done;
  for (int i = 0; i < 1000 && done.size() < 3; ++i) engine.poll(done);
  ASSERT_EQ(done.size(), 3u);
  for (const test::StandInCopy& c : rocm.copies())
    EXPECT_EQ(c.engine, c.src_device == 0 ? 0b100000u : 0b1000000u)
        << "a copy " << c.src_device << " -> " << c.dst_device << " left its link's engine";
  EXPECT_EQ(rocm.copies().size(), 3u) << "split across engines of other links";
  std::filesystem::remove_all(options.kfd_topology);
}

TEST(HsaRecommendedEngines, NoTopologyMeansNoSplitAcrossEveryFreeEngine) {
  StandInNode node = node_of(kRocm62);
  node.available = [](int, int) { return 0xFFFCu; };
  test::HsaStandIn rocm(node);
  EngineOptions options;
  options.split_bytes = 1 << 16;
  options.kfd_topology = "/nonexistent";
  HsaEngine engine(rocm.hsa(), &rocm.hip(), options, "test");
  std::byte* a = rocm.gpu_alloc(0, 1 << 20);
  std::byte* b = rocm.gpu_alloc(1, 1 << 20);
  const CopyRequest copy{a, b, 1 << 20, 1, 0, 1};
  engine.submit({&copy, 1});
  rocm.wait_idle();
  EXPECT_EQ(rocm.copies().size(), 1u) << "a 1 MiB copy was cut into one piece per free engine";
}

// CLR 6.x's stream wait is a one-thread kernel unless GPU_STREAMOPS_CP_WAIT is set; with it set,
// the wait accepts only signal memory, which irisd cannot write: a stream-ordered call then fails
// with a message naming the variable instead of HIP's bare hipErrorInvalidValue.
TEST(HipStreamWait, CommandProcessorWaitsAreRefusedNamingTheVariable) {
  HsaStandIn rocm(node_of(kRocm62));
  const auto runtime = make_hip_runtime(rocm.hip());
  std::byte* flags = rocm.gpu_alloc(0, 4096);
  const auto address = reinterpret_cast<uint64_t>(flags);
  ::unsetenv("GPU_STREAMOPS_CP_WAIT");
  EXPECT_NO_THROW(runtime->wait_value_geq(nullptr, address, 1));
  ::setenv("GPU_STREAMOPS_CP_WAIT", "1", 1);
  try {
    runtime->wait_value_geq(nullptr, address, 1);
    ADD_FAILURE() << "the wait was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
    EXPECT_NE(std::string(e.what()).find("Unset GPU_STREAMOPS_CP_WAIT"), std::string::npos)
        << e.what();
  }
  ::unsetenv("GPU_STREAMOPS_CP_WAIT");
}

}  // namespace
}  // namespace iris::daemon
