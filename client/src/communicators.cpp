#include "client/src/communicators.hpp"

#include "iris/error.hpp"

namespace iris {

std::shared_ptr<CommRank> Communicators::join(v1::SessionRequest& request, const std::string& key,
                                              uint32_t nranks, uint32_t rank) {
  auto* init = request.mutable_comm_init();
  init->set_key(key);
  init->set_nranks(nranks);
  init->set_rank(rank);
  auto joined = std::make_shared<CommRank>();
  joined->key = key;
  joined->nranks = nranks;
  joined->rank = rank;
  joined->node_addresses.assign(init->node_addresses().begin(), init->node_addresses().end());
  joined->node_of_rank.assign(init->node_of_rank().begin(), init->node_of_rank().end());
  joined->secret = init->secret();
  joined->op_timeout_ms = init->op_timeout_ms();
  joined->traffic_class = init->traffic_class();
  v1::SessionResponse answer;
  return link_.call_and_record(
      mutex_,
      [&] {
        uint64_t connection = 0;
        answer = link_.session_call(request, "communicator init", {}, nullptr, &connection);
        return connection;
      },
      [&](uint64_t connection) {
        joined->id = answer.comm_id();
        joined->resume_secret = answer.comm_secret();
        joined->connection = connection;
        std::erase_if(comms_, [](const std::weak_ptr<CommRank>& c) { return c.expired(); });
        comms_.push_back(joined);
        return joined;
      });
}

std::pair<uint64_t, uint64_t> Communicators::id_and_connection(const CommRank& comm) const {
  std::lock_guard lock(mutex_);
  return {comm.id.load(std::memory_order_relaxed), comm.connection};
}

std::optional<v1::SessionResponse> Communicators::call_naming(
    CommRank& comm, const std::function<void(v1::SessionRequest&, uint64_t id)>& name,
    const char* what, uint64_t* connection) {
  const auto deadline = link_.call_deadline();
  for (;;) {
    const auto [id, on] = id_and_connection(comm);
    v1::SessionRequest request;
    name(request, id);
    try {
      if (auto answer = link_.call_on(on, request, what)) {
        if (connection != nullptr) *connection = on;
        return answer;
      }
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kDaemonGone || !link_.resumed_since(on, deadline)) throw;
    }
    link_.wait_while_resuming(deadline);
    link_.throw_if_gone();
    std::lock_guard lock(mutex_);
    // Destroyed before a resume read it: no irisd holds it any more.
    if (comm.destroyed && comm.connection == on) return std::nullopt;
    if (SessionLink::Clock::now() >= deadline)
      throw Error(ErrorCode::kDaemonGone,
                  std::string(what) + ": irisd did not come back within the resume window");
  }
}

void Communicators::destroy(CommRank& comm) {
  {
    std::lock_guard lock(mutex_);
    comm.destroyed = true;
  }
  call_naming(
      comm,
      [](v1::SessionRequest& request, uint64_t id) {
        request.mutable_comm_destroy()->set_comm_id(id);
      },
      "communicator destroy");
}

std::map<uint64_t, uint64_t> Communicators::resume(
    const std::function<UnfinishedRequests(uint64_t comm_id)>& unfinished) {
  std::vector<std::shared_ptr<CommRank>> comms;
  {
    // Under the lock that destroy() marks them under: one destroyed after this is carried, and
    // destroyed again there (call_naming).
    std::lock_guard lock(mutex_);
    for (const auto& weak : comms_)
      if (auto comm = weak.lock(); comm && !comm->destroyed) comms.push_back(std::move(comm));
  }
  std::map<uint64_t, uint64_t> ids;  // the previous irisd's id -> the new one
  for (const auto& comm : comms) {
    const uint64_t old_id = comm->id.load();
    const uint64_t next = comm->next_seq.load();
    const UnfinishedRequests open = unfinished(old_id);
    const uint64_t resume_seq = open.collectives.empty() ? next : *open.collectives.begin();
    v1::SessionRequest request;
    auto* init = request.mutable_comm_init();
    init->set_key(comm->key);
    init->set_nranks(comm->nranks);
    init->set_rank(comm->rank);
    for (const std::string& address : comm->node_addresses) init->add_node_addresses(address);
    for (uint32_t node : comm->node_of_rank) init->add_node_of_rank(node);
    init->set_secret(comm->secret);
    init->set_op_timeout_ms(comm->op_timeout_ms);
    init->set_traffic_class(comm->traffic_class);
    init->set_resume_seq(resume_seq);
    {
      std::lock_guard lock(mutex_);
      init->set_comm_secret(comm->resume_secret);
    }
    for (uint64_t seq = resume_seq + 1; seq < next; ++seq) {
      if (open.collectives.count(seq) != 0) continue;
      init->add_completed_seqs(seq);
      if (init->completed_seqs_size() > 1024)
        throw Error(ErrorCode::kLimitExceeded,
                    "communicator '" + comm->key + "' completed more than 1024 collectives after " +
                        "its oldest unfinished one (seq " + std::to_string(resume_seq) + ")");
    }
    add_p2p_progress(*comm, open, *init);
    const auto answer = link_.resume_call(request, "resume a communicator");
    ids[old_id] = answer.comm_id();
    std::lock_guard lock(mutex_);
    comm->resume_secret = answer.comm_secret();
  }
  return ids;
}

void Communicators::add_p2p_progress(const CommRank& comm, const UnfinishedRequests& unfinished,
                                     v1::CommInitRequest& init) {
  for (const auto& [channel, posted] : comm.p2p_posted) {
    const auto found = unfinished.point_to_point.find(channel);
    const std::set<uint64_t> none;
    const auto& open = found == unfinished.point_to_point.end() ? none : found->second;
    auto* progress = init.add_p2p_progress();
    progress->set_send(channel.first);
    progress->set_peer(channel.second);
    const uint64_t below = open.empty() ? posted + 1 : *open.begin();
    progress->set_done_below(below);
    for (uint64_t k = below + 1; k <= posted; ++k)
      if (open.count(k) == 0) progress->add_done_after(k);
  }
}

void Communicators::carry(const std::map<uint64_t, uint64_t>& ids, uint64_t left,
                          uint64_t connection) {
  std::lock_guard lock(mutex_);
  for (const auto& weak : comms_)
    if (auto comm = weak.lock())
      // Carried: its id is the irisd's that went (a communicator destroyed earlier and carried
      // nowhere keeps an older irisd's id, which may equal one of those).
      if (auto id = ids.find(comm->id.load()); id != ids.end() && comm->connection == left) {
        comm->id.store(id->second);
        comm->connection = connection;
      }
}

}  // namespace iris
