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
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "daemon/engines/engine.hpp"
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

class CopyDispatcher final : public Poller {
 public:
  CopyDispatcher(Engine& engine, Stats& stats) : engine_(engine), stats_(stats) {}

  Engine& engine() const { return engine_; }

  // Gives `copy` its cookie: its completion goes to `owner` with `tag`. Counted in flight on its
  // device from now; queue it with submit().
  void track(CopyRequest& copy, CopyOwner& owner, uint64_t tag);
  // Hands tracked copies to the engine.
  void submit(std::span<const CopyRequest> copies) { engine_.submit(copies); }
  // One copy outside any plan, tracked and queued: `done` runs with its result.
  void submit_one(CopyRequest copy, std::function<void(ErrorCode)> done);
  // Copies between host memory done at once on this thread (Engine::copy_now), `bytes` together:
  // done and counted when it returns.
  void copy_now(std::span<const HostCopy> copies, uint64_t bytes);

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
  };
  // A free slot for `copy`, its cookie written into it and counted in flight on its device.
  Slot& take_slot(CopyRequest& copy);
  void count(std::size_t device, ErrorCode code, TransferPath path, uint64_t bytes, uint64_t copies,
             bool were_in_flight);

  Engine& engine_;
  Stats& stats_;
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_slots_;
  std::vector<CopyCompletion> completions_;
};

}  // namespace iris::daemon
