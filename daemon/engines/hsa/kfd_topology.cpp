#include "daemon/engines/hsa/kfd_topology.hpp"

#include <filesystem>

#include "iris/shared/kfd_gpus.hpp"

namespace iris::daemon::hsa {

namespace fs = std::filesystem;

RecommendedMasks read_recommended_sdma_masks(const std::string& topology_root) {
  RecommendedMasks masks;
  const fs::path nodes = fs::path(topology_root) / "nodes";
  std::error_code ec;
  // Node id -> PCI bus id of the GPU it is.
  std::map<uint64_t, std::string> bus_of_node;
  for (const KfdGpu& gpu : read_kfd_gpus(topology_root)) bus_of_node[gpu.node] = gpu.bus_id;
  for (const auto& [node, bus] : bus_of_node) {
    const fs::path links = nodes / std::to_string(node) / "io_links";
    if (!fs::is_directory(links, ec)) continue;
    for (const auto& link : fs::directory_iterator(links, ec)) {
      const auto props = read_kfd_properties(link.path() / "properties");
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
