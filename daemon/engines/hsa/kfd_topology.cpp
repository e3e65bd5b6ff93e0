#include "daemon/engines/hsa/kfd_topology.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>

namespace iris::daemon::hsa {

namespace {
namespace fs = std::filesystem;

std::map<std::string, uint64_t> read_properties(const fs::path& file) {
  std::map<std::string, uint64_t> out;
  std::ifstream in(file);
  std::string key;
  uint64_t value = 0;
  while (in >> key >> value) out[key] = value;
  return out;
}
}  // namespace

RecommendedMasks read_recommended_sdma_masks(const std::string& topology_root) {
  RecommendedMasks masks;
  const fs::path nodes = fs::path(topology_root) / "nodes";
  std::error_code ec;
  if (!fs::is_directory(nodes, ec)) return masks;
  // Node id -> PCI bus id of the GPU it is (CPU nodes have gpu_id 0).
  std::map<uint64_t, std::string> bus_of_node;
  for (const auto& node : fs::directory_iterator(nodes, ec)) {
    const auto props = read_properties(node.path() / "properties");
    auto gpu = props.find("gpu_id");
    auto location = props.find("location_id");
    if (gpu == props.end() || gpu->second == 0 || location == props.end()) continue;
    const uint64_t domain = props.count("domain") != 0 ? props.at("domain") : 0;
    const uint64_t bdf = location->second;
    char bus[32];
    std::snprintf(bus, sizeof(bus), "%04llx:%02llx:%02llx.%llx",
                  static_cast<unsigned long long>(domain),
                  static_cast<unsigned long long>((bdf >> 8) & 0xff),
                  static_cast<unsigned long long>((bdf >> 3) & 0x1f),
                  static_cast<unsigned long long>(bdf & 0x7));
    try {
      bus_of_node[std::stoull(node.path().filename().string())] = bus;
    } catch (const std::exception&) {
    }
  }
  for (const auto& [node, bus] : bus_of_node) {
    const fs::path links = nodes / std::to_string(node) / "io_links";
    if (!fs::is_directory(links, ec)) continue;
    for (const auto& link : fs::directory_iterator(links, ec)) {
      const auto props = read_properties(link.path() / "properties");
      auto to = props.find("node_to");
      auto mask = props.find("recommended_sdma_engine_id_mask");
      if (to == props.end() || mask == props.end() || mask->second == 0) continue;
      auto peer = bus_of_node.find(to->second);
      if (peer == bus_of_node.end()) continue;
      masks[{bus, peer->second}] = static_cast<uint32_t>(mask->second);
    }
  }
  return masks;
}

}  // namespace iris::daemon::hsa
