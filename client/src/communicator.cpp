#include "iris/communicator.hpp"

#include <algorithm>
#include <array>
#include <string_view>
#include <thread>

#include "client/src/client_impl.hpp"
#include "iris/shared/checked_range.hpp"
#include "iris/shared/collective_shape.hpp"

namespace iris {

// One rank's call of a collective, as its API method received it; what each side names and
// how large it is comes from the collective's shape (iris/shared/collective_shape.hpp).
struct CollectiveCall {
  shm::Opcode opcode;
  const void* send = nullptr;
  void* recv = nullptr;
  uint64_t bytes = 0;  // per block
  uint32_t root = 0;
  // all-to-all-v: send counts, send displacements, receive counts, receive displacements.
  std::array<const std::vector<uint64_t>*, 4> v = {};
};

struct Communicator::Impl {
  std::shared_ptr<Client::Impl> client;
  std::shared_ptr<CommRank> state;  // id, rank and sequence, shared with the session
  uint32_t nranks;
  uint32_t rank;
  bool destroyed = false;
};

namespace {
Communicator::Impl* join(Client::Impl* client, v1::SessionRequest& request, const std::string& key,
                         uint32_t nranks, uint32_t rank, const CommOptions& options,
                         std::unique_ptr<Communicator::Impl>& out) {
  if (client == nullptr)
    throw Error(ErrorCode::kInvalidArgument,
                "Communicator::init on an empty iris::Client: use iris::Client::connect()");
  if (options.op_timeout.count() < 0)
    throw Error(ErrorCode::kInvalidArgument,
                "CommOptions::op_timeout is negative: pass 0 for none, or how long an operation "
                "may wait for a rank");
  request.mutable_comm_init()->set_op_timeout_ms(static_cast<uint64_t>(options.op_timeout.count()));
  if (static_cast<uint32_t>(options.traffic_class) > static_cast<uint32_t>(TrafficClass::kBulk))
    throw Error(ErrorCode::kInvalidArgument,
                "CommOptions::traffic_class is " +
                    std::to_string(static_cast<uint32_t>(options.traffic_class)) +
                    ": kAuto, kLatency or kBulk");
  request.mutable_comm_init()->set_traffic_class(static_cast<uint32_t>(options.traffic_class));
  out = std::make_unique<Communicator::Impl>();
  out->state = client->comms->join(request, key, nranks, rank);
  out->client = client->shared_from_this();
  out->nranks = nranks;
  out->rank = rank;
  return out.get();
}
}  // namespace

Communicator Communicator::init(Client& client, const std::string& key, uint32_t nranks,
                                uint32_t rank, const CommOptions& options) {
  v1::SessionRequest request;
  std::unique_ptr<Impl> impl;
  join(client.impl_.get(), request, key, nranks, rank, options, impl);
  return Communicator(std::move(impl));
}

Communicator Communicator::init(Client& client, const std::string& key, uint32_t nranks,
                                uint32_t rank, const NodeSet& nodes, const CommOptions& options,
                                const std::atomic<bool>* stop) {
  v1::SessionRequest request;
  auto* init = request.mutable_comm_init();
  for (const std::string& address : nodes.addresses) init->add_node_addresses(address);
  for (uint32_t node : nodes.node_of_rank) init->add_node_of_rank(node);
  init->set_secret(nodes.secret);
  std::unique_ptr<Impl> impl;
  Impl* joined = join(client.impl_.get(), request, key, nranks, rank, options, impl);
  Communicator comm(std::move(impl));
  // Every node's irisd must know the communicator before data can flow to it.
  auto status = [](v1::SessionRequest& request, uint64_t id) {
    request.mutable_comm_status()->set_comm_id(id);
  };
  const auto deadline = std::chrono::steady_clock::now() + nodes.join_timeout;
  auto pause = std::chrono::microseconds(200);
  for (;;) {
    const auto answer =
        *joined->client->comms->call_naming(*joined->state, status, "communicator init (nodes)");
    if (answer.nodes_joined() >= answer.nodes_total()) return comm;
    if (stop != nullptr && stop->load())
      throw Error(ErrorCode::kCancelled, "communicator '" + key + "': stopped while " +
                                             std::to_string(answer.nodes_joined()) + " of " +
                                             std::to_string(answer.nodes_total()) +
                                             " nodes had joined");
    if (std::chrono::steady_clock::now() >= deadline)
      throw Error(ErrorCode::kTimeout,
                  "communicator '" + key + "': " + std::to_string(answer.nodes_joined()) + " of " +
                      std::to_string(answer.nodes_total()) + " nodes joined within " +
                      std::to_string(nodes.join_timeout.count()) +
                      " ms: start a rank on every node, with the same key, nodes and secret");
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(20'000));
  }
}

Communicator::Communicator() = default;
Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Communicator::Communicator(Communicator&&) noexcept = default;
Communicator& Communicator::operator=(Communicator&&) noexcept = default;
Communicator::~Communicator() = default;

namespace {
const Communicator::Impl& usable(const std::unique_ptr<Communicator::Impl>& impl) {
  if (!impl)
    throw Error(ErrorCode::kInvalidArgument,
                "this iris::Communicator is empty (default-constructed or moved from): use "
                "iris::Communicator::init()");
  return *impl;
}
}  // namespace

uint32_t Communicator::rank() const { return usable(impl_).rank; }
uint32_t Communicator::nranks() const { return usable(impl_).nranks; }
uint64_t Communicator::id() const { return usable(impl_).state->id.load(); }

namespace {

// Runs a collective's checks and submission: a request refused here, before irisd saw it, is
// counted in the session segment so that the operator sees it (iris-ctl sessions).
template <typename Submit>
Request counting_rejections(Communicator::Impl* impl, Submit&& submit) {
  try {
    return submit();
  } catch (const Error& e) {
    const bool refused = e.code() == ErrorCode::kInvalidArgument ||
                         e.code() == ErrorCode::kNotFound || e.code() == ErrorCode::kOutOfRange;
    if (refused && impl != nullptr) impl->client->submissions->count_rejection();
    throw;
  }
}

// The end of the furthest (displacement, count) block: the bytes a v-argument spans.
uint64_t v_extent(const std::vector<uint64_t>& counts, const std::vector<uint64_t>& displs) {
  uint64_t end = 0;
  for (std::size_t j = 0; j < counts.size(); ++j) {
    if (counts[j] == 0) continue;
    const auto e = checked_add(displs[j], counts[j]);
    if (!e)
      throw Error(ErrorCode::kOutOfRange,
                  "all_to_all_v block for rank " + std::to_string(j) + " overflows 64 bits");
    end = std::max(end, *e);
  }
  return end;
}

}  // namespace

Request Communicator::all_gather(const void* send, void* recv, std::size_t bytes, Stream stream) {
  return submit({.opcode = shm::Opcode::kAllGather, .send = send, .recv = recv, .bytes = bytes},
                stream);
}

Request Communicator::all_to_all(const void* send, void* recv, std::size_t bytes_per_peer,
                                 Stream stream) {
  return submit(
      {.opcode = shm::Opcode::kAllToAll, .send = send, .recv = recv, .bytes = bytes_per_peer},
      stream);
}

Request Communicator::all_to_all_v(const void* send, const std::vector<uint64_t>& send_counts,
                                   const std::vector<uint64_t>& send_displs, void* recv,
                                   const std::vector<uint64_t>& recv_counts,
                                   const std::vector<uint64_t>& recv_displs, Stream stream) {
  return submit({.opcode = shm::Opcode::kAllToAllV,
                 .send = send,
                 .recv = recv,
                 .v = {&send_counts, &send_displs, &recv_counts, &recv_displs}},
                stream);
}

Request Communicator::broadcast(void* buf, std::size_t bytes, uint32_t root, Stream stream) {
  return submit(
      {.opcode = shm::Opcode::kBroadcast, .send = buf, .recv = buf, .bytes = bytes, .root = root},
      stream);
}

Request Communicator::gather(const void* send, void* recv, std::size_t bytes, uint32_t root,
                             Stream stream) {
  return submit(
      {.opcode = shm::Opcode::kGather, .send = send, .recv = recv, .bytes = bytes, .root = root},
      stream);
}

Request Communicator::scatter(const void* send, void* recv, std::size_t bytes, uint32_t root,
                              Stream stream) {
  return submit(
      {.opcode = shm::Opcode::kScatter, .send = send, .recv = recv, .bytes = bytes, .root = root},
      stream);
}

void Communicator::barrier() { submit({.opcode = shm::Opcode::kBarrier}, {}).wait(); }

Request Communicator::send(const void* buf, std::size_t bytes, uint32_t peer, Stream stream) {
  return submit({.opcode = shm::Opcode::kSend, .send = buf, .bytes = bytes, .root = peer}, stream);
}

Request Communicator::recv(void* buf, std::size_t bytes, uint32_t peer, Stream stream) {
  return submit({.opcode = shm::Opcode::kRecv, .recv = buf, .bytes = bytes, .root = peer}, stream);
}

namespace {

// Where a significant pointer lies: in a Buffer, else in GPU memory registered on first use
// (held in `held` until the request is submitted). Throws naming the argument when neither
// holds it or the range runs past the buffer's end.
// `at`: where the buffers registered with irisd put it (Client::Impl::locate).
BufferLocation locate_range(Client::Impl& client, HeldRegistrations& held, std::string_view name,
                            const char* what, const void* ptr, uint64_t bytes,
                            std::optional<BufferLocation> at) {
  if (ptr == nullptr)
    throw Error(ErrorCode::kInvalidArgument, std::string(name) + ": the " + what +
                                                 " pointer is null but significant on this rank");
  // A range running past a Buffer may still be GPU memory of this process (a tensor beside a
  // registered one): first-use registration covers it.
  if (!at || bytes > at->available) {
    if (GpuRegistrationCache* cache = client.gpu_cache()) {
      if (auto found = cache->locate(reinterpret_cast<uintptr_t>(ptr), bytes)) {
        held.add(*cache, *found);
        at = BufferLocation{found->buffer_id, found->offset, found->available, true};
      }
    }
  }
  if (!at)
    throw Error(ErrorCode::kNotFound,
                std::string(name) + ": " + what +
                    " pointer is not inside a buffer from Client::allocate, registered memory, "
                    "or (with irisd's cuda engine) GPU memory of this process");
  if (bytes > at->available)
    throw Error(ErrorCode::kOutOfRange, std::string(name) + ": " + what + " range of " +
                                            std::to_string(bytes) + " bytes runs " +
                                            std::to_string(bytes - at->available) +
                                            " bytes past the end of its buffer");
  return *at;
}

bool disjoint(const void* a, uint64_t a_bytes, const void* b, uint64_t b_bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a);
  const auto y = reinterpret_cast<uintptr_t>(b);
  return x + a_bytes <= y || y + b_bytes <= x;
}

}  // namespace

namespace {

// What one rank's call names on each side, read from the collective's shape: whether it names a
// send and a receive range, how many bytes each spans, and its own block (the copy from this
// rank to itself), with all-to-all-v's four arrays back to back in `v_args`.
struct RankSides {
  bool send = false;
  bool recv = false;
  uint64_t send_bytes = 0;
  uint64_t recv_bytes = 0;
  std::optional<shm::PairBlock> own;
  std::vector<uint64_t> v_args;
};

uint64_t side_bytes(const shm::CollectiveShape& shape, shm::Side side, uint64_t bytes,
                    uint32_t nranks) {
  const auto all = shm::range_bytes(side, nranks, bytes);
  if (!all)
    throw Error(ErrorCode::kOutOfRange, std::string(shape.name) + " of " + std::to_string(bytes) +
                                            " bytes x " + std::to_string(nranks) +
                                            " ranks overflows 64 bits");
  return *all;
}

RankSides sides_of(const shm::CollectiveShape& shape, const CollectiveCall& call, uint32_t nranks,
                   uint32_t rank) {
  if (shape.rooted && call.root >= nranks)
    throw Error(ErrorCode::kInvalidArgument,
                std::string(shape.name) + ": root " + std::to_string(call.root) +
                    " is out of range for " + std::to_string(nranks) + " ranks");
  RankSides sides;
  sides.send = shape.send.significant(rank, call.root) && !shape.one_buffer;
  sides.recv = shape.recv.significant(rank, call.root);
  if (shape.send.extent != shm::Extent::kPerPeerCounts) {
    sides.send_bytes = side_bytes(shape, shape.send, call.bytes, nranks);
    sides.recv_bytes = side_bytes(shape, shape.recv, call.bytes, nranks);
    sides.own = shm::pair_block(shape, rank, rank, call.root, call.bytes);
    return sides;
  }
  for (const auto* v : call.v)
    if (v->size() != nranks)
      throw Error(ErrorCode::kInvalidArgument,
                  std::string(shape.name) + ": counts and displacements need " +
                      std::to_string(nranks) + " entries each (one per rank), got " +
                      std::to_string(v->size()));
  const auto& [send_counts, send_displs, recv_counts, recv_displs] = call.v;
  sides.send_bytes = v_extent(*send_counts, *send_displs);
  sides.recv_bytes = v_extent(*recv_counts, *recv_displs);
  sides.v_args.reserve(4 * uint64_t{nranks});
  for (const auto* v : call.v) sides.v_args.insert(sides.v_args.end(), v->begin(), v->end());
  // Unequal counts are irisd's to report, as a size mismatch.
  if ((*send_counts)[rank] == (*recv_counts)[rank] && (*send_counts)[rank] != 0)
    sides.own = shm::PairBlock{(*send_displs)[rank], (*recv_displs)[rank], (*send_counts)[rank]};
  return sides;
}

}  // namespace

Request Communicator::submit(const CollectiveCall& call, Stream stream) {
  // A send or receive is its side of a two-rank pair (the sender is rank 0, the pair's root):
  // the pair's shape says what it names. Its entry's root carries the peer.
  const bool p2p = shm::is_point_to_point(static_cast<uint32_t>(call.opcode));
  const shm::CollectiveShape& shape = *shm::shape_of(p2p ? shm::Opcode::kSendRecv : call.opcode);
  const std::string_view name = shm::opcode_name(call.opcode);
  return counting_rejections(impl_.get(), [&] {
    if (!impl_ || impl_->destroyed)
      throw Error(ErrorCode::kInvalidArgument,
                  std::string(name) + " on a destroyed or empty communicator");
    if (stream && stream.handle() == nullptr)
      throw Error(ErrorCode::kInvalidArgument,
                  std::string(name) +
                      " needs a created stream (the legacy default stream is not supported); "
                      "leave the stream out for the host-blocking form");
    if (p2p && call.root >= impl_->nranks)
      throw Error(ErrorCode::kInvalidArgument,
                  std::string(name) + ": peer " + std::to_string(call.root) +
                      " is out of range for " + std::to_string(impl_->nranks) + " ranks");
    CollectiveCall as_pair = call;
    as_pair.root = shm::kSenderInPair;
    const RankSides sides = p2p ? sides_of(shape, as_pair, 2,
                                           call.opcode == shm::Opcode::kSend ? shm::kSenderInPair
                                                                             : shm::kReceiverInPair)
                                : sides_of(shape, call, impl_->nranks, impl_->rank);
    // Sends and receives are matched per channel, in order: no collective sequence number.
    const bool sequenced = !p2p;
    CommRank* comm = impl_->state.get();
    Client::Impl& client = *impl_->client;
    shm::CollectiveArgs args{call.opcode, comm->id.load(), shm::kNoBuffer, 0, shm::kNoBuffer,
                             0,           call.bytes,      call.root};
    std::optional<BufferLocation> from, to;
    HeldRegistrations held;  // the client's cache is looked up only for memory no Buffer holds
    const auto found = client.registrations->locate(
        {sides.send ? call.send : nullptr, sides.recv ? call.recv : nullptr});
    if (sides.send) {
      from = locate_range(client, held, name, "send", call.send, sides.send_bytes, found[0]);
      args.send_buffer = from->buffer_id;
      args.send_offset = from->offset;
    }
    if (sides.recv) {
      to = locate_range(client, held, name, "receive", call.recv, sides.recv_bytes, found[1]);
      args.recv_buffer = to->buffer_id;
      args.recv_offset = to->offset;
    }
    if (shape.one_buffer) {
      args.send_buffer = args.recv_buffer;
      args.send_offset = args.recv_offset;
    }
    shm::SubmitEntry entry = shm::collective_entry(args);
    if (!stream)
      return client.submit(entry, comm, sequenced, std::nullopt, {}, sides.v_args, &held);
    entry.flags |= shm::kStreamOrdered;
    // The caller's stream copies the rank's block to itself when both sides are its GPU memory:
    // done by irisd, that same-GPU copy would run on SMs in irisd's context, and the GPU would
    // switch contexts for it (`iris-gpu-signal-probe`; docs/PERFORMANCE-HISTORY.md, "Which
    // transfers pay the context switch"). Overlapping
    // ranges (in place, or invalid) are left to irisd.
    std::optional<Client::Impl::StreamCopy> own_block;
    if (sides.own && from && to && from->gpu && to->gpu &&
        disjoint(call.send, sides.send_bytes, call.recv, sides.recv_bytes)) {
      entry.flags |= shm::kOwnBlockCopiedByClient;
      own_block = Client::Impl::StreamCopy{
          static_cast<char*>(call.recv) + sides.own->recv_offset,
          static_cast<const char*>(call.send) + sides.own->send_offset, sides.own->bytes};
    }
    const GpuStream on{stream.handle(),
                       stream.kind() == Stream::Kind::kHip ? GpuVendor::kHip : GpuVendor::kCuda};
    return client.submit(entry, comm, sequenced, on, own_block, sides.v_args, &held);
  });
}

void Communicator::destroy() {
  if (!impl_ || impl_->destroyed) return;
  impl_->destroyed = true;
  if (impl_->client->link->gone()) {
    impl_->state->destroyed = true;
    return;
  }
  impl_->client->comms->destroy(*impl_->state);
}

}  // namespace iris
