// The meeting point's bookkeeping, without sockets: which connections wait in which group, and
// what each gets once its group is complete, refused or out of time. Pure, so that its rules are
// tested alone (tests/unit/meeting_groups_test.cpp); MeetingPoint drives it from its thread.
//
// A group is named by the job's 32-byte secret, so only ranks that hold the job's id meet in it.
// Its first hello fixes nranks; a hello that disagrees, or a rank a waiting connection holds, is
// refused alone and the group waits on. A connection that closes while waiting leaves (its rank
// may come again). Every rank's node is its irisd's address; nodes are numbered in order of their
// lowest rank, so rank 0's node is node 0 on every rank.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "iris/shared/meeting_wire.hpp"

namespace iris::daemon {

class MeetingGroups {
 public:
  using Clock = std::chrono::steady_clock;
  using Connection = int;

  struct Limits {
    std::size_t max_groups;          // groups waiting at once
    std::chrono::milliseconds wait;  // from a group's first hello to its last
  };
  // Bytes to send on a connection, after which it closes.
  struct Reply {
    Connection connection;
    std::string bytes;
  };

  explicit MeetingGroups(Limits limits) : limits_(limits) {}

  // `hello` came on `connection` (which sent nothing before): the replies to send now (every
  // member's when the group is complete, this one's when refused, none while it waits).
  std::vector<Reply> arrive(Connection connection, const meeting::Hello& hello,
                            Clock::time_point now);
  // `connection` closed or failed; it leaves the group it waited in.
  void leave(Connection connection);
  // The replies to groups whose time ran out by `now` (each member is told how many came).
  std::vector<Reply> expire(Clock::time_point now);

  // When the group `connection` waits in runs out of time; nullopt when it waits in none.
  std::optional<Clock::time_point> deadline(Connection connection) const;

  std::size_t groups() const { return groups_.size(); }
  std::size_t waiting() const { return group_of_.size(); }

 private:
  struct Member {
    Connection connection;
    std::string address;
  };
  struct Group {
    uint32_t nranks;
    Clock::time_point deadline;
    std::map<uint32_t, Member> members;  // by rank
  };
  static Reply refusal(Connection c, ErrorCode code, std::string message);
  std::vector<Reply> complete(Group& group);

  Limits limits_;
  std::map<meeting::Group, Group> groups_;
  std::map<Connection, std::pair<meeting::Group, uint32_t>> group_of_;  // group and rank
};

}  // namespace iris::daemon
