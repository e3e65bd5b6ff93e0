// What this node sent to the other nodes of one communicator, kept until every rank of the
// receiving node has completed the collective (that node says so with a NodeDone). Should the
// receiving node's irisd restart, its ranks run the collective again and need the data again,
// while this node's ranks may have completed it and reused their buffers: the kept copy is sent
// instead. Bounded: past `max_bytes` (or kMaxArrivals) the oldest copies go, and a node that comes
// back still needing one of them cannot resume.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "daemon/scaleout/staging_pool.hpp"

namespace iris::daemon {

class KeptArrivals {
 public:
  struct Arrival {
    uint32_t node = 0;  // the node it was sent to
    uint64_t seq = 0;
    uint32_t rank = 0;                 // the rank of this node that arrived
    std::string header;                // the NodeMessage as sent
    std::shared_ptr<StagedData> data;  // its data, or null when it had none
  };
  static constexpr std::size_t kMaxArrivals = 65536;

  explicit KeptArrivals(uint64_t max_bytes) : max_bytes_(max_bytes) {}

  void keep(Arrival arrival);
  // Every rank of node `node` completed collective `seq`.
  void release(uint32_t node, uint64_t seq);
  // Node `node` came back after its irisd restarted: drops what it no longer needs (`completed`
  // says which collectives every rank of it completed) and returns the rest, in sequence order.
  // `lost`: a collective it still needs whose copy went over the bound, if any.
  std::vector<Arrival> to_send_again(uint32_t node, const std::function<bool(uint64_t)>& completed,
                                     std::optional<uint64_t>& lost);
  uint64_t bytes() const { return bytes_; }
  std::size_t size() const { return kept_.size(); }

 private:
  void drop(std::map<std::tuple<uint64_t, uint32_t, uint32_t>, Arrival>::iterator it);

  uint64_t max_bytes_;
  uint64_t bytes_ = 0;
  // By (seq, node, rank): the oldest first.
  std::map<std::tuple<uint64_t, uint32_t, uint32_t>, Arrival> kept_;
  // By node: collectives whose copies went over the bound and that the node has not completed
  // yet (as many as kMaxArrivals; past that, `overflowed_`: the node cannot resume at all).
  std::map<uint32_t, std::set<uint64_t>> dropped_;
  std::set<uint32_t> overflowed_;
};

}  // namespace iris::daemon
