// The meeting point's groups (meeting_groups.hpp).
#include "daemon/front/meeting_groups.hpp"

namespace iris::daemon {

MeetingGroups::Reply MeetingGroups::refusal(Connection c, ErrorCode code, std::string message) {
  meeting::Answer a;
  a.error = code;
  a.message = std::move(message);
  return {c, meeting::encode(a)};
}

std::vector<MeetingGroups::Reply> MeetingGroups::arrive(Connection connection,
                                                        const meeting::Hello& hello,
                                                        Clock::time_point now) {
  auto it = groups_.find(hello.group);
  if (it == groups_.end()) {
    if (groups_.size() >= limits_.max_groups)
      return {refusal(connection, ErrorCode::kLimitExceeded,
                      "the meeting point has " + std::to_string(groups_.size()) +
                          " jobs waiting, its limit: try again later, or meet at another "
                          "node's irisd")};
    it = groups_.emplace(hello.group, Group{hello.nranks, now + limits_.wait, {}}).first;
  }
  Group& g = it->second;
  if (hello.nranks != g.nranks)
    return {refusal(connection, ErrorCode::kNranksMismatch,
                    "this rank says nranks " + std::to_string(hello.nranks) +
                        ", the job's first rank here said " + std::to_string(g.nranks))};
  if (g.members.count(hello.rank) != 0)
    return {refusal(connection, ErrorCode::kAlreadyExists,
                    "rank " + std::to_string(hello.rank) +
                        " is already waiting at the meeting point (two processes with one rank?)")};
  g.members.emplace(hello.rank, Member{connection, hello.node_address});
  group_of_.emplace(connection, std::make_pair(hello.group, hello.rank));
  if (g.members.size() < g.nranks) return {};
  std::vector<Reply> replies = complete(g);
  groups_.erase(it);
  return replies;
}

std::vector<MeetingGroups::Reply> MeetingGroups::complete(Group& group) {
  meeting::Answer a;
  std::map<std::string, uint32_t> node_of_address;
  for (const auto& [rank, member] : group.members) {
    const auto [at, added] =
        node_of_address.emplace(member.address, static_cast<uint32_t>(a.addresses.size()));
    if (added) a.addresses.push_back(member.address);
    a.node_of_rank.push_back(at->second);
  }
  const std::string bytes = meeting::encode(a);
  std::vector<Reply> replies;
  for (const auto& [rank, member] : group.members) {
    group_of_.erase(member.connection);
    replies.push_back({member.connection, bytes});
  }
  return replies;
}

void MeetingGroups::leave(Connection connection) {
  const auto it = group_of_.find(connection);
  if (it == group_of_.end()) return;
  const auto group = groups_.find(it->second.first);
  if (group != groups_.end()) {
    group->second.members.erase(it->second.second);
    if (group->second.members.empty()) groups_.erase(group);
  }
  group_of_.erase(it);
}

std::optional<MeetingGroups::Clock::time_point> MeetingGroups::deadline(
    Connection connection) const {
  const auto it = group_of_.find(connection);
  if (it == group_of_.end()) return std::nullopt;
  return groups_.at(it->second.first).deadline;
}

std::vector<MeetingGroups::Reply> MeetingGroups::expire(Clock::time_point now) {
  std::vector<Reply> replies;
  for (auto it = groups_.begin(); it != groups_.end();) {
    Group& g = it->second;
    if (g.deadline > now) {
      ++it;
      continue;
    }
    std::string missing;
    uint32_t listed = 0;
    for (uint32_t r = 0; r < g.nranks && listed < 8; ++r)
      if (g.members.count(r) == 0) {
        missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        ++listed;
      }
    const std::string message =
        std::to_string(g.members.size()) + " of " + std::to_string(g.nranks) +
        " ranks came to the meeting point within " + std::to_string(limits_.wait.count()) +
        " ms (missing rank " + missing + (g.nranks - g.members.size() > listed ? ", ..." : "") +
        "): did every rank get the same id, and did they all start?";
    for (const auto& [rank, member] : g.members) {
      group_of_.erase(member.connection);
      replies.push_back(refusal(member.connection, ErrorCode::kTimeout, message));
    }
    it = groups_.erase(it);
  }
  return replies;
}

}  // namespace iris::daemon
