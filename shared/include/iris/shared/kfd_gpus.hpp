// The AMD GPUs the kernel driver (KFD) lists in sysfs: <topology>/nodes/<n>/properties holds, per
// node, `gpu_id` (0 for CPU nodes), the PCI location (`domain`, `location_id` = bus << 8 | device
// << 3 | function) and `gfx_target_version` (major * 10000 + minor * 100 + stepping). irisd reads
// the SDMA engines KFD recommends per link from it (the hsa engine), and the RCCL build of its
// NCCL library the instruction set to compile its reduction kernels for: the HIP runtime's only
// report of it, hipDeviceProp_t, changed layout between ROCm 5 and 6.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace iris {

inline constexpr const char* kKfdTopology = "/sys/class/kfd/kfd/topology";

struct KfdGpu {
  uint64_t node = 0;
  std::string bus_id;               // lower-case "dddd:bb:dd.f"
  uint64_t gfx_target_version = 0;  // 0 where the kernel does not say
};

// A KFD properties file's "key value" lines (empty where it cannot be read).
std::map<std::string, uint64_t> read_kfd_properties(const std::string& file);

// The GPU nodes under `topology_root` (none where the folder does not exist), by node number.
std::vector<KfdGpu> read_kfd_gpus(const std::string& topology_root);

// The LLVM target name of a gfx_target_version: 90402 -> "gfx942", 90010 -> "gfx90a", 110000 ->
// "gfx1100" (the minor and stepping are hex digits); "" for 0.
std::string gfx_target_name(uint64_t gfx_target_version);

// The GPU with PCI bus id `bus_id` (any case), or nullptr.
const KfdGpu* find_kfd_gpu(const std::vector<KfdGpu>& gpus, const std::string& bus_id);

}  // namespace iris
