// Nodes of a std::map kept from erased entries for later insertions into maps of that type. The
// scheduler makes a map entry per collective and erases it when the collective retires, and the
// fair share one per waiting user and communicator, erased as their copies leave: with the nodes
// kept, steady traffic allocates and frees nothing per collective (glibc's malloc and free were
// about an eighth of the progress thread's instructions for a 2-rank 64 B all-gather). A kept
// node's value is reset at once, so that it holds nothing (no buffer mapping) while it waits; at
// most `cap` nodes are kept, so a burst of collectives does not keep its memory for good. A value
// with a clear() member is reset by it, so that it may keep memory of its own for the next use (a
// collective's rank records).
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace iris::daemon {

template <typename Map>
class NodeSpares {
 public:
  using Key = typename Map::key_type;
  using Value = typename Map::mapped_type;

  explicit NodeSpares(std::size_t cap) : cap_(cap) {}

  // map[key], a value-initialised Value (one already there is reset), in a kept node when there
  // is one. The caller fills it in place: a value made elsewhere and moved in would cost a move
  // more.
  Value& put(Map& map, const Key& key) {
    if (spares_.empty()) {
      auto [it, inserted] = map.try_emplace(key);
      if (!inserted) reset(it->second);
      return it->second;
    }
    auto node = std::move(spares_.back());
    spares_.pop_back();
    node.key() = key;
    auto [it, inserted, unused] = map.insert(std::move(node));
    if (!inserted) {
      reset(it->second);
      spares_.push_back(std::move(unused));
    }
    return it->second;
  }

  // Erases `it`; its node, its value reset, is kept while fewer than cap are.
  void erase(Map& map, typename Map::iterator it) {
    auto node = map.extract(it);
    reset(node.mapped());
    if (spares_.size() < cap_) spares_.push_back(std::move(node));
  }

  std::size_t kept() const { return spares_.size(); }

 private:
  static void reset(Value& v) {
    if constexpr (requires { v.clear(); })
      v.clear();
    else
      v = Value{};
  }

  std::size_t cap_;
  std::vector<typename Map::node_type> spares_;
};

}  // namespace iris::daemon
