// The engine's one door on the data path: every copy irisd queues goes through here, and every
// completion comes back here (the poller of the engine's completions) and goes to whoever queued
// the copy: the scheduler for a collective's copies, a callback for a copy outside any plan (scale
// out staging GPU data into host memory). It also counts each copy in its device's counters
// (stats' DeviceCounters: in flight, bytes by copy engine or compute units, errors), so that the
// count is the same whoever asked.
//
// A copy's cookie is (generation << 32) | slot: finding the owner is an index, and a completion
// reported twice, or one for a slot reused since, is recognised and counts for nothing. Slots are
// reused, never freed: steady traffic allocates nothing.
//
// Paced (Pacing::queue_bytes > 0) while users share the node: while sessions of two uids are
// attached, or copies of two uids are unfinished on a device (and for kSharedHold after), irisd
// hands the device's engines at most queue_bytes at once. Copies wait per flow (FairShare: the uid,
// the communicator and the class) and go to the engine in slices of at most slice_bytes as earlier
// ones complete, so a copy that becomes ready waits behind about queue_bytes, not behind a tenant's
// whole transfer (a GPU's copy engines run their queue first in, first out). Where the engine keeps
// a copy engine of the device for latency work, latency slices go there with a bound of their own
// and, while latency work comes, bulk slices to the others, with half the bound in half slices:
// where the engines still serve them in order (an H100's device-to-host copies, whatever the
// stream or context), a small collective waits for the bulk bytes in flight ahead of it, and each
// slice costs the engines about 3 us of its own, so the bound trades one against the other. On an
// H100, 2 MiB in 1 MiB slices gave a small all-gather's tenant beside a bulk one a p99 1.6-2.8x
// of alone against 2.1-4.1x at 4 MiB in 2 MiB slices, and the bulk tenant 0.75 of its bandwidth
// alone beside back-to-back 4 KiB all-gathers against 0.85; without latency work, bulk keeps the
// whole bound (two bulk tenants: 0.91 of half the link each). Where the engine serves latency
// slices before its queued bulk (the host engine's workers), latency slices also have a bound of
// their own and bulk keeps the whole one: only the chunks being copied stand before them.
// A copy completes for its owner once its last slice did. A user alone on the node hands the
// engine each copy whole, as without pacing: a single job pays nothing for it. A copy whose path
// the engine runs many times faster than the bound's link (Engine::pace_scale: CUDA's copies
// within one GPU) waits in a lane of its own with the bound and slices that many times larger:
// at the PCIe bound, 2 MiB slices of it went to the engine no faster than irisd saw each end, a
// fifth of its speed on an H100; whole and unpaced, a tenant's small copies within the GPU waited
// for the other's whole 1 GiB of copies (17-24x of alone).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "daemon/engines/engine.hpp"
#include "daemon/engines/fair_share.hpp"
#include "daemon/node_spares.hpp"
#include "daemon/progress_loop.hpp"
#include "daemon/stats.hpp"

namespace iris::daemon {

// Whoever queued copies: learns of each one's end, with the tag it gave.
class CopyOwner {
 public:
  virtual void copy_done(uint64_t tag, const CopyCompletion& completion) = 0;

 protected:
  ~CopyOwner() = default;
};

// Pacing::queue_bytes's default: by engine (queue_bytes_for).
inline constexpr uint64_t kEngineQueueBytesAuto = UINT64_MAX;

struct Pacing {
  uint64_t slice_bytes = 2ull << 20;
  // Per device; 0: every copy straight to the engine; auto: queue_bytes_for(engine).
  uint64_t queue_bytes = kEngineQueueBytesAuto;
  uint32_t bulk_every = 8;  // FairShare: bulk's slice at least this often
  // A collective whose copies are all at most this large is latency work; larger is bulk.
  uint64_t latency_max_bytes = 1ull << 20;
  // Users whose communicators may ask for latency whatever the size (others: up to the above),
  // by uid or by group (Runtime asks in_group when a communicator is made).
  std::set<uint32_t> latency_uids;
  std::string latency_group;
};

// The bound auto picks: 4 MiB on GPU engines, with 2 MiB slices one on each copy engine that
// bulk uses on an H100 (3 engines, one kept for latency work): a small copy then waited for about
// half a slice, with a second slice queued on each for nearly all the bytes in flight, and
// slices under 2 MiB cost the engines bandwidth themselves (docs/PERFORMANCE.md, "Copy engines
// shared between tenants"). 8 MiB on the host engine, whose workers copy one slice each: on a
// 16-core host, unpaced, a tenant's 1 MiB all-gathers waited for the other's 256 MiB copies (p99
// 233-377x of alone, three runs), paced 3.0-4.0x, for 0.74-1.03 of the bulk tenant's bandwidth;
// on 2 cores the scheduler's time slices decided the wait either way.
uint64_t queue_bytes_for(const std::string& engine_name);

class CopyDispatcher final : public Poller {
 public:
  using Clock = std::chrono::steady_clock;
  // `now`: the clock pacing and engine time read (tests pass their own).
  CopyDispatcher(Engine& engine, Stats& stats, Pacing pacing = {},
                 Clock::time_point (*now)() = &Clock::now);

  Engine& engine() const { return engine_; }

  // Gives `copy` its cookie: its completion goes to `owner` with `tag`. Counted in flight on its
  // device from now; queue it with submit().
  void track(CopyRequest& copy, CopyOwner& owner, uint64_t tag);
  // Hands tracked copies to the engine, paced under `flow`.
  void submit(std::span<const CopyRequest> copies, const FlowKey& flow);
  // A uid's share of the engines against other uids (FairShare weights; default 1).
  void set_weight(uint32_t uid, uint32_t weight);
  // How many uids have sessions attached (the runtime says on every attach and end).
  void set_users(std::size_t users) { users_ = users; }
  // The class of a collective whose largest copy is `largest_copy` bytes, on a communicator that
  // asked for `requested` and was `granted` latency at any size (its creator in
  // Pacing::latency_uids or latency_group): bulk when asked; latency when asked and granted; else
  // by size.
  TrafficClass class_of(uint64_t largest_copy, RequestedClass requested, bool granted) const;
  const Pacing& pacing() const { return pacing_; }
  // Whether copies are paced now: irisd paces, and users share the node (sessions of two uids
  // attached, or copies of two uids on a device within kSharedHold).
  bool pacing_now() const;
  uint64_t latency_max_bytes() const { return pacing_.latency_max_bytes; }
  // One copy outside any plan, tracked and queued: `done` runs with its result.
  void submit_one(CopyRequest copy, std::function<void(ErrorCode)> done);
  // Copies between host memory done at once on this thread (Engine::copy_now), `bytes` together,
  // for `flow`: done and counted when it returns.
  void copy_now(std::span<const HostCopy> copies, uint64_t bytes, const FlowKey& flow);

  // One completion from the engine (poll() feeds them; tests too).
  void complete(const CopyCompletion& completion);

  // Poller: the engine's finished copies. The loop must not sleep while the engine's copies
  // finish without announcing it on its completion fd.
  bool poll() override;
  bool try_enter_sleep() override {
    return !engine_.needs_polling() && engine_.arm_completion_wakeup();
  }
  void exit_sleep() override { engine_.disarm_completion_wakeup(); }

 private:
  struct Slot {
    CopyOwner* owner = nullptr;  // null: a submit_one copy, `done` runs
    uint64_t tag = 0;
    std::function<void(ErrorCode)> done;
    std::size_t device = 0;  // its DeviceCounters slot
    uint32_t generation = 0;
    bool used = false;
    // Paced: the whole copy, its slices at the engine, and what they reported.
    CopyRequest request{};
    uint32_t uid = 0;
    uint64_t bytes = 0;  // the whole copy's
    TrafficClass cls = TrafficClass::kBulk;
    std::size_t user = 0;  // its Stats::users slot
    std::chrono::steady_clock::time_point queued_at{};
    uint64_t in_flight_bytes = 0;
    uint32_t slices_out = 0;
    bool all_issued = false;
    std::size_t lane = 0;  // its index in lanes_
    ErrorCode error = ErrorCode::kOk;
    TransferPath path = TransferPath::kCopyEngine;
  };
  // The copies of one device on one path (Engine::pace_scale), paced under one bound.
  struct Lane {
    Lane(FairShare::Options options, uint64_t bound, uint64_t slice)
        : fair(options), bound(bound), slice(slice) {}
    FairShare fair;
    uint64_t bound, slice;           // the configured ones times the path's Engine::pace_scale
    uint64_t in_flight = 0;          // bytes of slices at the engine
    uint64_t latency_in_flight = 0;  // of which latency work
    // The device keeps a copy engine for latency work (Engine::keeps_latency_engine): each class
    // has its own bound then, and bulk slices stay off that engine until latency_until (for
    // kSharedHold after the last latency copy): a tenant whose neighbour only has a session
    // attached, or only moves bulk, keeps every engine.
    bool latency_engine = false;
    // Latency slices have a bound of their own: a copy engine is kept for them (latency_engine)
    // or the engine serves them before its queued bulk (Engine::serves_latency_first).
    bool latency_bound = false;
    std::chrono::steady_clock::time_point latency_until{};
    std::map<uint32_t, uint32_t> copies_of;  // unfinished copies by uid
    NodeSpares<std::map<uint32_t, uint32_t>> copies_of_spares{8};
    std::chrono::steady_clock::time_point shared_until{};  // paced until then
    // Engine time (Stats' UserEngineCounters) of completions whose engine gave none
    // (CopyCompletion::engine_ns 0): since when the engines have had copies, and the last
    // completion.
    std::chrono::steady_clock::time_point busy_from{}, last_done{};
  };
  static constexpr std::chrono::seconds kSharedHold{1};
  // A free slot for `copy`, its cookie written into it and counted in flight on its device.
  Slot& take_slot(CopyRequest& copy);
  Slot* slot_of(uint64_t cookie);
  // The index in lanes_ of a device slot's lane for copies of `scale` (Engine::pace_scale), made
  // on first use: the first kDeviceSlots lanes are the devices' at scale 1, the next their faster
  // path's.
  std::size_t open_lane(std::size_t device, uint32_t scale);
  // `uid`'s slot in Stats::users, given on first sight.
  std::size_t user_slot(uint32_t uid);
  // Hands the lane's engines slices while it has room.
  void pump(std::size_t index);
  // Adds slice `s` (none: false) of lane `l` to batch_.
  bool take(Lane& l, const std::optional<FairShare::Slice>& s, Clock::time_point now);
  // The copy in `slot` ended (`code`): its owner learns it, the slot is free again.
  void finish(uint32_t index, const CopyCompletion& completion);
  void count(std::size_t device, ErrorCode code, TransferPath path, uint64_t bytes, uint64_t copies,
             bool were_in_flight);
  void count_bytes(std::size_t device, ErrorCode code, TransferPath path, uint64_t bytes);
  void count_copy(std::size_t device, ErrorCode code);

  Engine& engine_;
  Stats& stats_;
  Pacing pacing_;
  Clock::time_point (*now_)();
  std::vector<std::unique_ptr<Lane>> lanes_;  // by open_lane's index, made on first use
  std::map<uint32_t, uint32_t> weights_;
  std::map<uint32_t, std::size_t> user_slots_;
  std::vector<CopyRequest> batch_;
  std::vector<std::size_t> paced_lanes_;
  std::size_t users_ = 0;
  Clock::time_point shared_until_{};  // the latest of the lanes' shared_until (pacing_now)
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_slots_;
  std::vector<CopyCompletion> completions_;
};

}  // namespace iris::daemon
