// KFD's GPU nodes as irisd reads them from sysfs (iris/shared/kfd_gpus.hpp): CPU nodes and
// folders that are no node are skipped, each GPU's PCI bus id is built from its location and
// domain, and its instruction set's LLVM name from gfx_target_version, hex digits included.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "iris/shared/kfd_gpus.hpp"

namespace iris {
namespace {

TEST(KfdGpus, GpuNodesGiveTheirBusIdAndInstructionSet) {
  char dir[] = "/tmp/iris-kfd-gpus-XXXXXX";
  const std::string root = ::mkdtemp(dir);
  const auto write = [&](const std::string& node, const std::string& text) {
    std::filesystem::create_directories(root + "/nodes/" + node);
    std::ofstream(root + "/nodes/" + node + "/properties") << text;
  };
  write("0", "cpu_cores_count 96\ngpu_id 0\nlocation_id 0\n");
  write("10", "gpu_id 4242\nlocation_id " + std::to_string((0xc1 << 8) | (0 << 3) | 0) +
                  "\ndomain 2\ngfx_target_version 90402\n");
  write("2", "gpu_id 77\nlocation_id " + std::to_string((0x0c << 8) | (1 << 3) | 3) +
                 "\ngfx_target_version 90010\n");
  write("3", "gpu_id 78\n");  // no location: not a device irisd can name
  write("stray", "gpu_id 79\nlocation_id 256\n");
  const std::vector<KfdGpu> gpus = read_kfd_gpus(root);
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0].node, 2u);  // by node number, not by name
  EXPECT_EQ(gpus[0].bus_id, "0000:0c:01.3");
  EXPECT_EQ(gfx_target_name(gpus[0].gfx_target_version), "gfx90a");
  EXPECT_EQ(gpus[1].node, 10u);
  EXPECT_EQ(gpus[1].bus_id, "0002:c1:00.0");
  EXPECT_EQ(gfx_target_name(gpus[1].gfx_target_version), "gfx942");
  ASSERT_NE(find_kfd_gpu(gpus, "0002:C1:00.0"), nullptr);  // HIP may print upper case
  EXPECT_EQ(find_kfd_gpu(gpus, "0002:C1:00.0")->node, 10u);
  EXPECT_EQ(find_kfd_gpu(gpus, "0000:c1:00.0"), nullptr);
  EXPECT_TRUE(read_kfd_gpus(root + "/nonexistent").empty());
  std::filesystem::remove_all(root);
}

TEST(KfdGpus, InstructionSetNamesUseHexDigitsForMinorAndStepping) {
  EXPECT_EQ(gfx_target_name(90402), "gfx942");
  EXPECT_EQ(gfx_target_name(90500), "gfx950");
  EXPECT_EQ(gfx_target_name(90008), "gfx908");
  EXPECT_EQ(gfx_target_name(90010), "gfx90a");
  EXPECT_EQ(gfx_target_name(110000), "gfx1100");
  EXPECT_EQ(gfx_target_name(100300), "gfx1030");
  EXPECT_EQ(gfx_target_name(0), "");
}

}  // namespace
}  // namespace iris
