// The communicators a session joined, as libiris submits for them: their ids (which each irisd
// gives anew), where each one's collectives and sends stand, and what a resume presents to the
// next irisd to join it again where it stood. Its table has its own lock; a call naming a
// communicator goes only to the irisd its id is from (call_naming).
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "client/src/session_link.hpp"
#include "iris/shared/descriptor.hpp"

namespace iris {

// The channel of a send or receive entry, as CommRank::p2p_posted keys it: (a send, its peer).
inline std::pair<bool, uint32_t> p2p_channel(const shm::SubmitEntry& e) {
  return {e.opcode == static_cast<uint32_t>(shm::Opcode::kSend), e.root};
}

// A communicator rank: shared by its Communicator and the session, which rejoins it when irisd
// restarts (irisd then gives it a new id).
struct CommRank {
  std::string key;
  uint32_t nranks = 0;
  uint32_t rank = 0;
  std::atomic<uint64_t> id{0};
  std::atomic<uint64_t> next_seq{1};  // the next collective's sequence number
  // Sends (true) and receives (false) posted so far, by peer: each one's position in its
  // channel, which a resume tells irisd about (under the session's submission lock).
  std::map<std::pair<bool, uint32_t>, uint64_t> p2p_posted;
  // A communicator across nodes: its layout as the job passed it, passed again on resuming.
  std::vector<std::string> node_addresses;
  std::vector<uint32_t> node_of_rank;
  std::string secret;
  uint64_t op_timeout_ms = 0;  // CommOptions::op_timeout, passed again on resuming
  uint32_t traffic_class = 0;  // CommOptions::traffic_class, likewise
  // What irisd gave the communicator at creation: a resume presents it (under the table's lock).
  std::string resume_secret;
  std::atomic<bool> destroyed{false};
  // The irisd that gave `id` (SessionLink::current_connection()); both change together, under
  // the table's lock, when a resume carries the communicator to the next irisd.
  uint64_t connection = 0;
};

// What the session's submissions hold unfinished of one communicator, for its resume.
struct UnfinishedRequests {
  std::set<uint64_t> collectives;                                          // sequence numbers
  std::map<std::pair<bool, uint32_t>, std::set<uint64_t>> point_to_point;  // positions by channel
};

class Communicators {
 public:
  explicit Communicators(SessionLink& link) : link_(link) {}

  // Joins communicator `key` (`request` holds its comm_init, layout and options included).
  // Throws iris::Error.
  std::shared_ptr<CommRank> join(v1::SessionRequest& request, const std::string& key,
                                 uint32_t nranks, uint32_t rank);
  // A session call naming `comm` by its id: `name` writes the id into the request. Sent only to
  // the irisd the id is from, and again to the next irisd once a resume carried the communicator
  // there; never to one that does not know it (an old id may name another communicator there).
  // Nullopt when the communicator, destroyed, was carried nowhere. `connection`: where it was
  // answered.
  std::optional<v1::SessionResponse> call_naming(
      CommRank& comm, const std::function<void(v1::SessionRequest&, uint64_t id)>& name,
      const char* what, uint64_t* connection = nullptr);
  // Marks `comm` destroyed (a resume from now on leaves it behind) and destroys it on the irisd
  // holding it, if any.
  void destroy(CommRank& comm);
  // The irisd `comm`'s id is from, and that id, read together.
  std::pair<uint64_t, uint64_t> id_and_connection(const CommRank& comm) const;

  // The resume step, on the resume's connection: each communicator not destroyed joins the next
  // irisd at its oldest unfinished collective, with those it completed after it and its sends'
  // and receives' progress (`unfinished(id)`: what the submissions hold unfinished; the caller
  // holds the submission lock, which guards p2p_posted). Returns the previous irisd's ids to the
  // new ones; nothing changes here until carry().
  std::map<uint64_t, uint64_t> resume(
      const std::function<UnfinishedRequests(uint64_t comm_id)>& unfinished);
  // The session is back on the irisd of `connection`, having left `left`: the new ids hold.
  void carry(const std::map<uint64_t, uint64_t>& ids, uint64_t left, uint64_t connection);

 private:
  // Adds the progress of `comm`'s sends and receives to its resume's init.
  static void add_p2p_progress(const CommRank& comm, const UnfinishedRequests& unfinished,
                               v1::CommInitRequest& init);

  SessionLink& link_;
  mutable std::mutex mutex_;
  std::vector<std::weak_ptr<CommRank>> comms_;
};

}  // namespace iris
