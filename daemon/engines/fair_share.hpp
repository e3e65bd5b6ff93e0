// Which copy a device's engines take next when several wait: irisd's own choice, because a GPU's
// copy engines run what is queued on them first in, first out, whatever the streams' priorities,
// so a tenant's 1 GiB transfer queued first would hold every later copy for its whole length.
// Copies wait here per flow (one communicator of one uid, in one traffic class) and leave in
// slices of at most slice_bytes; CopyDispatcher takes the next slice while the device has less
// than its bound in flight, so a copy that becomes ready waits for about one slice. The choice:
//  - the class: latency first, but while bulk also waits it gets every `bulk_every`-th slice
//    (a stream of latency work never starves bulk);
//  - within a class, the uid by deficit round robin: each uid gets slices worth `weight` times
//    slice_bytes per round, so over time engine bytes split in proportion to the weights;
//  - within a uid, its communicators in turn, one slice each.
// Where a device keeps a copy engine for latency work, the caller takes each class's slices
// apart (next(cls)), with a bound for each: the class rule above is then the engines' own.
// Pure (no engine, no clock): tests/unit/fair_share_test.cpp checks the rules. Its queues and
// map nodes are kept from use to use (Fifo, NodeSpares): while users share the node every copy
// passes through here, and steady traffic allocates nothing. At most 64 nodes of each kind are
// kept, each queue with room for at most Fifo::kKeptRoom entries: a tenant's burst of
// communicators leaves at most a few hundred KiB behind per device.
#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <optional>

#include "daemon/fifo.hpp"
#include "daemon/node_spares.hpp"

namespace iris::daemon {

enum class TrafficClass : uint8_t { kLatency = 0, kBulk = 1 };
inline constexpr std::size_t kTrafficClassCount = 2;
inline constexpr const char* kTrafficClassNames[kTrafficClassCount] = {"latency", "bulk"};

// What a communicator asks for (CommInitRequest.traffic_class): by size, latency, or bulk.
enum class RequestedClass : uint8_t { kAuto = 0, kLatency = 1, kBulk = 2 };
inline constexpr const char* kRequestedClassNames[] = {"auto", "latency", "bulk"};

// irisd's own copies (scale-out staging) wait under this uid.
inline constexpr uint32_t kDaemonUid = UINT32_MAX;

struct FlowKey {
  uint32_t uid = 0;
  uint64_t comm = 0;
  TrafficClass cls = TrafficClass::kBulk;
  auto operator<=>(const FlowKey&) const = default;
};

class FairShare {
 public:
  struct Options {
    uint64_t slice_bytes = 2ull << 20;
    uint32_t bulk_every = 8;
  };
  // A piece of a waiting copy to hand to the engine.
  struct Slice {
    uint64_t item;    // as pushed
    uint64_t offset;  // into the copy
    uint64_t bytes;
    bool last;  // the copy's last slice
    FlowKey flow;
  };

  explicit FairShare(Options options) : options_(options) {}

  // A uid's share (default 1; 0 counts as 1).
  void set_weight(uint32_t uid, uint32_t weight);
  // A copy of `bytes` waits on `flow`; `item` names it for the caller.
  void push(const FlowKey& flow, uint64_t item, uint64_t bytes);
  // The next slice to start, or nullopt when nothing waits.
  std::optional<Slice> next();
  // The next slice of class `cls` (an engine kept for that class), of at most `slice_bytes`
  // (and Options::slice_bytes), or nullopt when none waits.
  std::optional<Slice> next(TrafficClass cls, uint64_t slice_bytes = UINT64_MAX);
  bool empty() const { return waiting_ == 0; }
  std::size_t waiting() const { return waiting_; }  // copies with slices not yet taken

 private:
  struct Pending {
    uint64_t item;
    uint64_t offset;
    uint64_t bytes;
  };
  using CommQueues = std::map<uint64_t, Fifo<Pending>>;  // waiting copies by comm, in order
  struct UidQueue {
    int64_t deficit = 0;
    Fifo<uint64_t> comms;  // in turn; each has work
    CommQueues by_comm;
    void clear() {
      deficit = 0;
      comms.clear();
      by_comm.clear();
    }
  };
  using UidQueues = std::map<uint32_t, UidQueue>;
  struct ClassQueue {
    Fifo<uint32_t> uids;  // in turn; each has work
    UidQueues by_uid;
  };

  std::optional<Slice> next_in(TrafficClass cls, uint64_t slice_bytes);
  uint64_t quantum(uint32_t uid) const;

  Options options_;
  ClassQueue classes_[kTrafficClassCount];
  std::map<uint32_t, uint32_t> weights_;
  NodeSpares<UidQueues> uid_spares_{64};
  NodeSpares<CommQueues> comm_spares_{64};
  uint32_t latency_in_a_row_ = 0;
  std::size_t waiting_ = 0;
};

}  // namespace iris::daemon
