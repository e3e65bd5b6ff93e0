#include "daemon/front/reports.hpp"

#include <algorithm>
#include <chrono>
#include <map>

namespace iris::daemon {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
}  // namespace

void fill_sessions(const SessionRegistry& sessions, const CommunicatorRegistry& comms,
                   const Limits& limits, const Caller& caller, v1::ListSessionsResponse& out) {
  std::map<uid_t, v1::UserUsage> users;
  auto user = [&](uid_t uid) -> v1::UserUsage& {
    v1::UserUsage& u = users[uid];
    u.set_uid(uid);
    return u;
  };
  for (const Session* s : sessions.list()) {
    if (!caller.sees_all && s->peer().uid != caller.uid) continue;
    v1::UserUsage& u = user(s->peer().uid);
    u.set_sessions(u.sessions() + 1);
    u.set_host_buffer_bytes(u.host_buffer_bytes() + s->host_buffer_bytes);
  }
  for (const auto& [uid, bytes] : comms.bytes_by_uid())
    if (caller.sees_all || uid == caller.uid) user(uid);
  for (auto& [uid, u] : users) {
    u.set_comm_bytes(comms.bytes_of_uid(uid));
    u.set_max_sessions(limits.max_sessions_per_uid);
    u.set_max_host_buffer_bytes(limits.max_buffer_bytes_per_uid);
    u.set_max_comm_bytes(limits.max_comm_bytes_per_uid);
    *out.add_users() = u;
  }
  for (const Session* s : sessions.list()) {
    if (!caller.sees_all && s->peer().uid != caller.uid) continue;
    auto* info = out.add_sessions();
    info->set_session_id(s->id());
    info->set_pid(static_cast<uint32_t>(s->peer().pid));
    info->set_uid(s->peer().uid);
    info->set_gid(s->peer().gid);
    info->set_client_name(s->client_name());
    info->set_buffers(static_cast<uint32_t>(s->buffers.size()));
    info->set_buffer_bytes(s->buffer_bytes);
    info->set_communicators(static_cast<uint32_t>(s->comm_ranks.size()));
    info->set_submitted(s->submitted);
    info->set_attached_seconds(seconds_since(s->attached_at()));
    info->set_client_rejections(s->client_rejections());
    for (const auto& [comm_id, rank] : s->comm_ranks) {
      const Communicator* comm = comms.find(comm_id);
      if (comm == nullptr) continue;
      auto* r = info->add_ranks();
      r->set_key(comm->key);
      r->set_rank(rank);
      r->set_nranks(comm->nranks);
    }
  }
}

namespace {
// Rank `r` of `comm`, with the session and pid holding it.
void describe_rank(const Communicator& comm, const SessionRegistry& sessions, uint32_t r,
                   v1::MissingRank& out) {
  out.set_rank(r);
  if (const auto& member = comm.members[r]) {
    out.set_session_id(*member);
    if (const Session* s = sessions.find(*member))
      out.set_pid(static_cast<uint32_t>(s->peer().pid));
  }
}
}  // namespace

void fill_comms(const CommunicatorRegistry& comms, const SessionRegistry& sessions,
                const PointToPoint& p2p, const Caller& caller, v1::ListCommsResponse& out) {
  for (const auto& [id, comm] : comms.all()) {
    if (!caller.sees_all && comm->uid != caller.uid) continue;
    auto* info = out.add_comms();
    info->set_comm_id(id);
    info->set_key(comm->key);
    info->set_nranks(comm->nranks);
    info->set_uid(comm->uid);
    info->set_broken(comm->broken);
    info->set_completed(comm->completed);
    info->set_traffic_class(kRequestedClassNames[static_cast<std::size_t>(comm->traffic_class)]);
    for (uint32_t r = 0; r < comm->nranks; ++r)
      if (comm->members[r]) info->add_joined_ranks(r);
    for (const auto& [seq, c] : comm->in_flight) {
      auto* f = info->add_in_flight();
      f->set_seq(seq);
      if (const RankArgs* reference = c.reference()) {
        f->set_bytes(reference->bytes);
        f->set_collective(std::string(shm::opcode_name(reference->kind)));
      }
      f->set_waiting_seconds(seconds_since(c.started));
      for (uint32_t r = 0; r < comm->nranks; ++r) {
        if (c.ranks.contains(r)) {
          f->add_arrived_ranks(r);
          continue;
        }
        f->add_waiting_on_ranks(r);
        describe_rank(*comm, sessions, r, *f->add_missing());
      }
    }
    const Communicator& parent = *comm;  // a structured binding cannot be captured (C++17)
    p2p.for_each_waiting(id, [&](uint32_t src, uint32_t dst, bool is_send, uint64_t bytes,
                                 std::chrono::steady_clock::time_point posted) {
      auto* w = info->add_waiting_p2p();
      w->set_op(is_send ? "send" : "recv");
      w->set_src(src);
      w->set_dst(dst);
      w->set_bytes(bytes);
      w->set_waiting_seconds(seconds_since(posted));
      const uint32_t peer = is_send ? dst : src;
      if (peer < parent.nranks) describe_rank(parent, sessions, peer, *w->mutable_waits_on());
    });
  }
}

}  // namespace iris::daemon
