// Communicators: joining by key (the first rank creates it), leaving (the others' collectives
// fail from then on), and removal once no member is left and no copy still runs for it.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon/collectives/collective_scheduler.hpp"
#include "daemon/config.hpp"
#include "daemon/sessions/session.hpp"

namespace iris::daemon {

class CommunicatorRegistry final : public Poller {
 public:
  static constexpr uint32_t kMaxRanks = 4096;
  // Keys are matched byte for byte and shown in logs and iris-ctl: short, printable ASCII.
  static constexpr std::size_t kMaxKeyBytes = 256;

  // Keeps stats.communicators at the number of communicators.
  CommunicatorRegistry(const Config& config, CollectiveScheduler& scheduler, Stats& stats);

  // Joins `s` to communicator `key` as `rank` of `nranks`, creating it if no communicator of
  // that key accepts ranks. `layout`: its nodes when it spans several daemons (every local rank
  // must pass the same). Returns its id; throws iris::Error naming the conflict.
  //
  // `resume_seq` > 0: the rank comes back after irisd restarted, its first sequence number here
  // being `resume_seq`. Its communicator is then one made by resuming ranks only (a new job's
  // communicator of the same key is a conflict), and every rank must be back within the resume
  // window, else the communicator fails as peer_lost.
  uint64_t join(Session& s, const std::string& key, uint32_t nranks, uint32_t rank,
                std::shared_ptr<const NodeLayout> layout = nullptr, uint64_t resume_seq = 0,
                const std::vector<uint64_t>& completed_after = {});
  static constexpr std::size_t kMaxCompletedAfter = 1024;
  // `s` leaves (`how`: "detached", "died", ...): whoever stays can never complete another
  // collective, so every collective in flight and every later one fails with kPeerLost and a
  // message naming the rank, its session and pid.
  void leave(Session& s, uint64_t comm_id, const std::string& how);
  // Poller: removes communicators whose last member left while copies were in flight, now that
  // they may have finished, and fails resumed communicators whose ranks did not all come back in
  // time (never counts as work).
  bool poll() override;

  Communicator* find(uint64_t id) const;
  const std::unordered_map<uint64_t, std::unique_ptr<Communicator>>& all() const { return comms_; }
  std::size_t size() const { return comms_.size(); }

 private:
  void remove_if_unused(uint64_t comm_id);
  void count();

  const Config& config_;
  CollectiveScheduler& scheduler_;
  Stats& stats_;
  std::unordered_map<uint64_t, std::unique_ptr<Communicator>> comms_;
  std::unordered_map<std::string, uint64_t> by_key_;  // communicators still accepting ranks
  std::vector<uint64_t> emptied_;                     // no members left, copies still in flight
  std::vector<uint64_t> resuming_;                    // resumed, not every rank back yet
  void expire_resumes();
  uint64_t next_id_ = 1;
};

}  // namespace iris::daemon
