// Where the other nodes of this irisd's communicators listen now, when that changed after the
// job's ranks were told (another node's irisd restarted and rejoined with a new address). Kept
// in a file beside the socket (`<socket>.nodes`, root's only), so that the next irisd on this
// node, resuming the same ranks with the addresses they were given at init, finds nodes that
// restarted before it: a rolling restart or upgrade of a job's nodes, one after another.
//
// Entries are by (communicator, node), a communicator named by a hash of its key and secret (the
// secret itself is never written). Whoever knows a job's key and secret can only redirect that
// job's own resuming ranks, which then fail to authenticate elsewhere. Bounded (kMaxEntries).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace iris::daemon {

class NodeAddressBook {
 public:
  static constexpr std::size_t kMaxEntries = 4096;

  // Reads `path` when it exists (what a previous irisd learned); a line it cannot read is
  // skipped with a warning.
  explicit NodeAddressBook(std::string path);

  // Node `node` of the communicator (`key`, `secret`) listens at `address` now.
  void learned(const std::string& key, const std::string& secret, uint32_t node,
               const std::string& address);
  // Replaces, in `addresses` (by node), those of nodes known to listen elsewhere now.
  void update(const std::string& key, const std::string& secret,
              std::vector<std::string>& addresses) const;
  // The communicator is gone: its entries go.
  void forget(const std::string& key, const std::string& secret);

 private:
  static uint64_t name(const std::string& key, const std::string& secret);
  void save() const;

  std::string path_;
  // By (communicator's name, node); the order they were learned in, to drop the oldest.
  std::map<std::pair<uint64_t, uint32_t>, std::pair<uint64_t, std::string>> entries_;
  uint64_t next_order_ = 0;
};

}  // namespace iris::daemon
