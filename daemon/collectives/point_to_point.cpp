#include "daemon/collectives/point_to_point.hpp"

namespace iris::daemon {

PointToPoint::PointToPoint(CommunicatorRegistry& comms, CollectiveScheduler& scheduler,
                           Completer& completer, Stats& stats, std::chrono::milliseconds timeout)
    : comms_(comms),
      scheduler_(scheduler),
      completer_(completer),
      stats_(stats),
      timeout_(timeout) {}

PointToPoint::~PointToPoint() = default;

PointToPoint::OfComm& PointToPoint::of(const Communicator& parent) {
  auto& state = by_parent_[parent.id];
  if (!state) {
    state = std::make_unique<OfComm>();
    Communicator& pair = state->pair;
    pair.id = next_pair_id_++;
    pair.key = parent.key + " (send/recv)";
    pair.nranks = 2;
    pair.uid = parent.uid;
    // Both sides of a match are there before it reaches the scheduler: the members only say
    // that neither has left.
    pair.members.assign(2, parent.id);
    pair.next_seq.assign(2, 1);
    by_pair_id_[pair.id] = state.get();
  }
  return *state;
}

std::optional<PointToPoint::Match> PointToPoint::post(const Communicator& parent, uint32_t src,
                                                      uint32_t dst, bool is_send, Side side) {
  // A broken parent never gets here (the arrivals fail its posts): the pair is whole.
  if (done_by_peer(parent, src, dst, is_send, side.position)) {
    completer_.complete(side.target, ErrorCode::kOk, "");
    return std::nullopt;
  }
  OfComm& state = of(parent);
  auto channel = state.channels.try_emplace({src, dst}).first;
  std::deque<Side>& mine = is_send ? channel->second.sends : channel->second.recvs;
  std::deque<Side>& theirs = is_send ? channel->second.recvs : channel->second.sends;
  if (theirs.empty()) {
    mine.push_back(std::move(side));
    return std::nullopt;
  }
  Side other = std::move(theirs.front());
  theirs.pop_front();
  if (channel->second.sends.empty() && channel->second.recvs.empty()) state.channels.erase(channel);
  const uint64_t seq = ++state.matches;
  if (is_send) return Match{state.pair, seq, std::move(side), std::move(other)};
  return Match{state.pair, seq, std::move(other), std::move(side)};
}

bool PointToPoint::done_by_peer(const Communicator& parent, uint32_t src, uint32_t dst,
                                bool is_send, uint64_t position) {
  if (!parent.resumed || position == 0) return false;
  const uint32_t peer = is_send ? dst : src;
  if (peer >= parent.resumed_from.size() || parent.resumed_from[peer] == 0) return false;
  const auto& done = is_send ? parent.recvs_done : parent.sends_done;
  auto it = done.find({src, dst});
  return it != done.end() && it->second.covers(position);
}

void PointToPoint::resumed_rank(const Communicator& parent, uint32_t rank) {
  auto it = by_parent_.find(parent.id);
  if (it == by_parent_.end()) return;
  OfComm& state = *it->second;
  for (auto c = state.channels.begin(); c != state.channels.end();) {
    const uint32_t src = c->first.first, dst = c->first.second;  // captured below
    for (bool sends : {true, false}) {
      // A waiting send whose receiver is `rank`, or a waiting receive whose sender is.
      if ((sends ? dst : src) != rank) continue;
      std::deque<Side>& sides = sends ? c->second.sends : c->second.recvs;
      std::erase_if(sides, [&](const Side& side) {
        if (!done_by_peer(parent, src, dst, sends, side.position)) return false;
        completer_.complete(side.target, ErrorCode::kOk, "");
        return true;
      });
    }
    c = c->second.sends.empty() && c->second.recvs.empty() ? state.channels.erase(c) : std::next(c);
  }
}

void PointToPoint::for_each_waiting(uint64_t parent_id, const WaitingVisitor& visit) const {
  auto it = by_parent_.find(parent_id);
  if (it == by_parent_.end()) return;
  for (const auto& [channel_key, channel] : it->second->channels) {
    for (const Side& side : channel.sends)
      visit(channel_key.first, channel_key.second, true, side.request.args.bytes, side.posted);
    for (const Side& side : channel.recvs)
      visit(channel_key.first, channel_key.second, false, side.request.args.bytes, side.posted);
  }
}

Communicator* PointToPoint::find_pair(uint64_t pair_id) const {
  auto it = by_pair_id_.find(pair_id);
  return it == by_pair_id_.end() ? nullptr : &it->second->pair;
}

void PointToPoint::fail_waiting(OfComm& state, ErrorCode code, const std::string& why) {
  for (auto& [key, channel] : state.channels) {
    for (auto* sides : {&channel.sends, &channel.recvs}) {
      for (Side& side : *sides) {
        stats_.count_error(code);
        completer_.complete(side.target, code, why);
      }
    }
  }
  state.channels.clear();
}

void PointToPoint::break_comm(uint64_t parent_id, ErrorCode code, const std::string& why) {
  auto it = by_parent_.find(parent_id);
  if (it == by_parent_.end()) return;
  OfComm& state = *it->second;
  fail_waiting(state, code, why);
  // Matches whose other side still waits for its stream fail when it arrives; none is awaited.
  scheduler_.break_comm(state.pair, code, why);
  state.pair.members.assign(2, std::nullopt);
}

bool PointToPoint::poll() {
  if (by_parent_.empty()) return false;
  const auto now = std::chrono::steady_clock::now();
  if (now < next_timeout_check_) return false;
  next_timeout_check_ = now + std::chrono::milliseconds(100);
  bool failed = false;
  for (auto it = by_parent_.begin(); it != by_parent_.end();) {
    OfComm& state = *it->second;
    // The communicator's own timeout (its creator's choice) when shorter than irisd's.
    const Communicator* parent = comms_.find(it->first);
    const bool own =
        parent != nullptr && parent->op_timeout.count() != 0 && parent->op_timeout < timeout_;
    const std::chrono::milliseconds timeout = own ? parent->op_timeout : timeout_;
    for (auto c = state.channels.begin(); c != state.channels.end();) {
      const auto [src, dst] = c->first;
      for (bool sends : {true, false}) {
        std::deque<Side>& sides = sends ? c->second.sends : c->second.recvs;
        // Oldest first: the rest of the queue is younger.
        while (!sides.empty() && now - sides.front().posted >= timeout) {
          const std::string why =
              std::string(sends ? "a send from rank " : "a receive at rank ") +
              std::to_string(sends ? src : dst) + (sends ? " to rank " : " from rank ") +
              std::to_string(sends ? dst : src) + " on communicator '" + state.pair.key +
              "' was not matched within " + std::to_string(timeout.count()) +
              (own ? " ms (the communicator's timeout)" : " ms (--p2p-timeout-ms)") +
              ": every send needs a receive of the same size on its peer";
          stats_.count_error(ErrorCode::kTimeout);
          completer_.complete(sides.front().target, ErrorCode::kTimeout, why);
          sides.pop_front();
          failed = true;
        }
      }
      c = c->second.sends.empty() && c->second.recvs.empty() ? state.channels.erase(c)
                                                             : std::next(c);
    }
    // Its communicator is gone: nothing can post here again, and its state goes once no copy
    // of a match still runs.
    if (parent == nullptr && state.pair.in_flight.empty()) {
      fail_waiting(state, ErrorCode::kPeerLost, "the communicator ended");
      by_pair_id_.erase(state.pair.id);
      it = by_parent_.erase(it);
    } else {
      ++it;
    }
  }
  return failed;
}

}  // namespace iris::daemon
