// Where a multi-node communicator's ranks live: the daemons (nodes) taking part, by their UCX
// worker addresses, the node of each rank, which node is this daemon, and the job's secret.
// Every rank passes the same layout at init; this daemon keeps one per communicator.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace iris::daemon {

struct NodeLayout {
  std::vector<std::string> addresses;  // by node
  std::vector<uint32_t> node_of_rank;  // by rank
  uint32_t my_node = 0;
  std::string secret;

  bool local(uint32_t rank) const { return node_of_rank[rank] == my_node; }
  uint32_t nodes() const { return static_cast<uint32_t>(addresses.size()); }
  bool operator==(const NodeLayout&) const = default;
};

}  // namespace iris::daemon
