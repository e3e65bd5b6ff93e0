// Communicators: joining by key (the first rank creates it), leaving (the others' collectives
// fail from then on), and removal once no member is left and no copy still runs for it.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon/collectives/collective_scheduler.hpp"
#include "daemon/config.hpp"
#include "daemon/operations/tenant_log.hpp"
#include "daemon/sessions/session.hpp"

namespace iris::daemon {

// A resuming rank's progress on one of its point-to-point channels (ChannelProgress).
struct RankChannelProgress {
  uint32_t peer;
  bool send;
  uint64_t done_below;
  std::vector<uint64_t> done_after;
};
// What a rank resuming after a restart brings (CommInitRequest): `seq` > 0.
struct RankResume {
  uint64_t seq = 0;
  std::vector<uint64_t> completed_after;
  std::string secret;
  std::vector<RankChannelProgress> p2p_progress;
};

class CommunicatorRegistry final : public Poller {
 public:
  static constexpr uint32_t kMaxRanks = 4096;
  // Keys are matched byte for byte and shown in logs and iris-ctl: short, printable ASCII.
  static constexpr std::size_t kMaxKeyBytes = 256;

  // Keeps stats.communicators at the number of communicators.
  CommunicatorRegistry(const Config& config, CollectiveScheduler& scheduler, Stats& stats,
                       TenantLog& log);

  // Joins `s` to communicator `key` as `rank` of `nranks`, creating it if no communicator of
  // that key accepts ranks. Keys are each user's own unless allow_cross_uid_comms. `layout`: its
  // nodes when it spans several daemons (every local rank must pass the same). Returns its id;
  // throws iris::Error naming the conflict. The communicator's secret() goes back to the rank.
  //
  // `resume_seq` > 0 (a resumed session only): the rank comes back after irisd restarted, its
  // first sequence number here being `resume_seq`, with `secret` (the one irisd gave the
  // communicator at creation). It joins the communicator made by resuming ranks with that secret
  // (a new job's communicator of the same key, or a communicator with another secret, is someone
  // else's: it goes on beside them), and every rank must be back within the resume window, else
  // the communicator fails as peer_lost. A refused resume is logged with the uids involved.
  //
  // The state a communicator makes irisd hold counts against its creator's uid, and what a
  // resuming rank adds (its completed sequence numbers) against the rank's, up to
  // max_comm_bytes_per_uid (kLimitExceeded past it).
  using ChannelProgress = RankChannelProgress;
  using Resume = RankResume;
  // `settings`: taken from the rank that creates it.
  uint64_t join(Session& s, const std::string& key, uint32_t nranks, uint32_t rank,
                std::shared_ptr<const NodeLayout> layout = nullptr, const Resume& resume = {},
                const CommSettings& settings = {});
  static constexpr std::size_t kSecretBytes = 16;
  static constexpr std::size_t kMaxCompletedAfter = 1024;
  // `s` leaves (`how`: "detached", "died", ...): whoever stays can never complete another
  // collective, so every collective in flight and every later one fails with kPeerLost and a
  // message naming the rank, its session and pid.
  void leave(Session& s, uint64_t comm_id, const std::string& how);
  // Poller: removes communicators whose last member left while copies were in flight, now that
  // they may have finished, and fails resumed communicators whose ranks did not all come back in
  // time (never counts as work).
  bool poll() override;
  // Its deadlines (resume windows) are met on the loop's wake-ups, at least once a second.
  bool try_enter_sleep() override { return true; }

  Communicator* find(uint64_t id) const;
  // Bytes of communicator state counted against `uid` now (max_comm_bytes_per_uid).
  uint64_t bytes_of_uid(uid_t uid) const;
  const std::unordered_map<uid_t, uint64_t>& bytes_by_uid() const { return bytes_of_uid_; }
  const std::unordered_map<uint64_t, std::unique_ptr<Communicator>>& all() const { return comms_; }
  std::size_t size() const { return comms_.size(); }

 private:
  uint64_t join_checked(Session& s, const std::string& key, uint32_t nranks, uint32_t rank,
                        std::shared_ptr<const NodeLayout> layout, const Resume& resume,
                        const CommSettings& settings);
  void remove_if_unused(uint64_t comm_id);
  void count();
  std::string scope_of(uid_t uid, const std::string& key) const;
  // The communicator accepting ranks under `lookup` (Communicator::lookup), or null.
  Communicator* accepting(const std::string& lookup) const;
  // Counts `bytes` against `uid` (kLimitExceeded past max_comm_bytes_per_uid); returns them.
  uint64_t charge(uid_t uid, uint64_t bytes);
  void refund(Communicator& comm);
  static constexpr uint64_t kTrimAfterBytes = 64ull << 20;

  const Config& config_;
  CollectiveScheduler& scheduler_;
  Stats& stats_;
  TenantLog& log_;
  std::unordered_map<uint64_t, std::unique_ptr<Communicator>> comms_;
  std::unordered_map<std::string, uint64_t> by_key_;  // accepting ranks, by Communicator::lookup
  std::unordered_map<uid_t, uint64_t> bytes_of_uid_;
  uint64_t freed_since_trim_ = 0;
  std::vector<uint64_t> emptied_;   // no members left, copies still in flight
  std::vector<uint64_t> resuming_;  // resumed, not every rank back yet
  void expire_resumes();
  uint64_t next_id_ = 1;
};

}  // namespace iris::daemon
