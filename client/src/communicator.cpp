#include "iris/communicator.hpp"

#include <thread>

#include <algorithm>

#include "client/src/client_impl.hpp"
#include "iris/shared/checked_range.hpp"

namespace iris {

// One rank's side of a collective, as libiris checks and submits it.
struct CollectiveCall {
  shm::Opcode opcode;
  const char* name;
  const void* send = nullptr;
  uint64_t send_bytes = 0;
  const void* recv = nullptr;
  uint64_t recv_bytes = 0;
  uint64_t bytes = 0;  // per block
  uint32_t root = 0;
  std::span<const uint64_t> v_args = {};  // all-to-all-v: the four arrays back to back
  // The copy from this rank to itself, which the caller's stream runs when both sides are its
  // GPU memory (see shm::kOwnBlockCopiedByClient).
  void* self_dst = nullptr;
  const void* self_src = nullptr;
  uint64_t self_bytes = 0;
  // False where the argument is insignificant on this rank (it is then neither checked nor sent).
  bool send_significant = true;
  bool recv_significant = true;
};

struct Communicator::Impl {
  std::shared_ptr<Client::Impl> client;
  uint64_t id;
  uint32_t nranks;
  uint32_t rank;
  std::atomic<uint64_t> next_seq{1};
  bool destroyed = false;
};

namespace {
Communicator::Impl* join(Client::Impl* client, v1::SessionRequest& request, const std::string& key,
                         uint32_t nranks, uint32_t rank, std::unique_ptr<Communicator::Impl>& out) {
  if (client == nullptr)
    throw Error(ErrorCode::kInvalidArgument,
                "Communicator::init on an empty iris::Client: use iris::Client::connect()");
  auto* init = request.mutable_comm_init();
  init->set_key(key);
  init->set_nranks(nranks);
  init->set_rank(rank);
  const auto response = client->session_call(request, "communicator init");
  out = std::make_unique<Communicator::Impl>();
  out->client = client->shared_from_this();
  out->id = response.comm_id();
  out->nranks = nranks;
  out->rank = rank;
  return out.get();
}
}  // namespace

Communicator Communicator::init(Client& client, const std::string& key, uint32_t nranks,
                                uint32_t rank) {
  v1::SessionRequest request;
  std::unique_ptr<Impl> impl;
  join(client.impl_.get(), request, key, nranks, rank, impl);
  return Communicator(std::move(impl));
}

Communicator Communicator::init(Client& client, const std::string& key, uint32_t nranks,
                                uint32_t rank, const NodeSet& nodes) {
  v1::SessionRequest request;
  auto* init = request.mutable_comm_init();
  for (const std::string& address : nodes.addresses) init->add_node_addresses(address);
  for (uint32_t node : nodes.node_of_rank) init->add_node_of_rank(node);
  init->set_secret(nodes.secret);
  std::unique_ptr<Impl> impl;
  Impl* joined = join(client.impl_.get(), request, key, nranks, rank, impl);
  Communicator comm(std::move(impl));
  // Every node's irisd must know the communicator before data can flow to it.
  v1::SessionRequest status;
  status.mutable_comm_status()->set_comm_id(joined->id);
  const auto deadline = std::chrono::steady_clock::now() + nodes.join_timeout;
  auto pause = std::chrono::microseconds(200);
  for (;;) {
    const auto answer = joined->client->session_call(status, "communicator init (nodes)");
    if (answer.nodes_joined() >= answer.nodes_total()) return comm;
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
uint64_t Communicator::id() const { return usable(impl_).id; }

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
    if (refused && impl != nullptr) impl->client->count_rejection();
    throw;
  }
}

uint64_t blocks_bytes(const char* name, uint64_t bytes, uint32_t nranks) {
  const auto all = checked_mul(bytes, nranks);
  if (!all)
    throw Error(ErrorCode::kOutOfRange, std::string(name) + " of " + std::to_string(bytes) +
                                            " bytes x " + std::to_string(nranks) +
                                            " ranks overflows 64 bits");
  return *all;
}

void check_root(const char* name, uint32_t root, uint32_t nranks) {
  if (root >= nranks)
    throw Error(ErrorCode::kInvalidArgument, std::string(name) + ": root " + std::to_string(root) +
                                                 " is out of range for " + std::to_string(nranks) +
                                                 " ranks");
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
  return counting_rejections(impl_.get(), [&] {
    CollectiveCall call{.opcode = shm::Opcode::kAllGather,
                        .name = "all_gather",
                        .send = send,
                        .send_bytes = bytes,
                        .recv = recv,
                        .bytes = bytes};
    if (impl_) {
      call.recv_bytes = blocks_bytes(call.name, bytes, impl_->nranks);
      call.self_dst = static_cast<char*>(recv) + uint64_t{impl_->rank} * bytes;
      call.self_src = send;
      call.self_bytes = bytes;
    }
    return submit(call, stream);
  });
}

Request Communicator::all_to_all(const void* send, void* recv, std::size_t bytes_per_peer,
                                 Stream stream) {
  return counting_rejections(impl_.get(), [&] {
    CollectiveCall call{.opcode = shm::Opcode::kAllToAll,
                        .name = "all_to_all",
                        .send = send,
                        .recv = recv,
                        .bytes = bytes_per_peer};
    if (impl_) {
      call.send_bytes = call.recv_bytes = blocks_bytes(call.name, bytes_per_peer, impl_->nranks);
      const uint64_t own = uint64_t{impl_->rank} * bytes_per_peer;
      call.self_dst = static_cast<char*>(recv) + own;
      call.self_src = static_cast<const char*>(send) + own;
      call.self_bytes = bytes_per_peer;
    }
    return submit(call, stream);
  });
}

Request Communicator::all_to_all_v(const void* send, const std::vector<uint64_t>& send_counts,
                                   const std::vector<uint64_t>& send_displs, void* recv,
                                   const std::vector<uint64_t>& recv_counts,
                                   const std::vector<uint64_t>& recv_displs, Stream stream) {
  return counting_rejections(impl_.get(), [&] {
    CollectiveCall call{
        .opcode = shm::Opcode::kAllToAllV, .name = "all_to_all_v", .send = send, .recv = recv};
    std::vector<uint64_t> args;
    if (impl_) {
      const uint32_t n = impl_->nranks;
      for (const auto* v : {&send_counts, &send_displs, &recv_counts, &recv_displs})
        if (v->size() != n)
          throw Error(ErrorCode::kInvalidArgument,
                      "all_to_all_v: counts and displacements need " + std::to_string(n) +
                          " entries each (one per rank), got " + std::to_string(v->size()));
      call.send_bytes = v_extent(send_counts, send_displs);
      call.recv_bytes = v_extent(recv_counts, recv_displs);
      args.reserve(4 * uint64_t{n});
      for (const auto* v : {&send_counts, &send_displs, &recv_counts, &recv_displs})
        args.insert(args.end(), v->begin(), v->end());
      call.v_args = args;
      const uint32_t r = impl_->rank;
      if (send_counts[r] == recv_counts[r]) {  // otherwise irisd reports the mismatch
        call.self_dst = static_cast<char*>(recv) + recv_displs[r];
        call.self_src = static_cast<const char*>(send) + send_displs[r];
        call.self_bytes = send_counts[r];
      }
    }
    return submit(call, stream);
  });
}

Request Communicator::broadcast(void* buf, std::size_t bytes, uint32_t root, Stream stream) {
  return counting_rejections(impl_.get(), [&] {
    CollectiveCall call{.opcode = shm::Opcode::kBroadcast,
                        .name = "broadcast",
                        .send = buf,
                        .send_bytes = bytes,
                        .recv = buf,
                        .recv_bytes = bytes,
                        .bytes = bytes,
                        .root = root};
    if (impl_) check_root(call.name, root, impl_->nranks);
    return submit(call, stream);
  });
}

Request Communicator::gather(const void* send, void* recv, std::size_t bytes, uint32_t root,
                             Stream stream) {
  return counting_rejections(impl_.get(), [&] {
    CollectiveCall call{.opcode = shm::Opcode::kGather,
                        .name = "gather",
                        .send = send,
                        .send_bytes = bytes,
                        .recv = recv,
                        .bytes = bytes,
                        .root = root,
                        .recv_significant = false};
    if (impl_) {
      check_root(call.name, root, impl_->nranks);
      if (impl_->rank == root) {
        call.recv_significant = true;
        call.recv_bytes = blocks_bytes(call.name, bytes, impl_->nranks);
        call.self_dst = static_cast<char*>(recv) + uint64_t{root} * bytes;
        call.self_src = send;
        call.self_bytes = bytes;
      }
    }
    return submit(call, stream);
  });
}

Request Communicator::scatter(const void* send, void* recv, std::size_t bytes, uint32_t root,
                              Stream stream) {
  return counting_rejections(impl_.get(), [&] {
    CollectiveCall call{.opcode = shm::Opcode::kScatter,
                        .name = "scatter",
                        .send = send,
                        .recv = recv,
                        .recv_bytes = bytes,
                        .bytes = bytes,
                        .root = root,
                        .send_significant = false};
    if (impl_) {
      check_root(call.name, root, impl_->nranks);
      if (impl_->rank == root) {
        call.send_significant = true;
        call.send_bytes = blocks_bytes(call.name, bytes, impl_->nranks);
        call.self_dst = recv;
        call.self_src = static_cast<const char*>(send) + uint64_t{root} * bytes;
        call.self_bytes = bytes;
      }
    }
    return submit(call, stream);
  });
}

void Communicator::barrier() {
  counting_rejections(impl_.get(), [&] {
    return submit(CollectiveCall{.opcode = shm::Opcode::kBarrier,
                                 .name = "barrier",
                                 .send_significant = false,
                                 .recv_significant = false},
                  {});
  }).wait();
}

namespace {

// Where a significant pointer lies: in a Buffer, else in GPU memory registered on first use
// (held in `held` until the request is submitted). Throws naming the argument when neither
// holds it or the range runs past the buffer's end.
BufferLocation locate_range(Client::Impl& client, HeldRegistrations& held, const char* name,
                            const char* what, const void* ptr, uint64_t bytes) {
  if (ptr == nullptr)
    throw Error(ErrorCode::kInvalidArgument, std::string(name) + ": the " + what +
                                                 " pointer is null but significant on this rank");
  auto at = client.locate(ptr);
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

Request Communicator::submit(const CollectiveCall& call, Stream stream) {
  if (!impl_ || impl_->destroyed)
    throw Error(ErrorCode::kInvalidArgument,
                std::string(call.name) + " on a destroyed or empty communicator");
  if (stream && stream.handle() == nullptr)
    throw Error(ErrorCode::kInvalidArgument,
                std::string(call.name) +
                    " needs a created stream (the legacy default stream is not supported); "
                    "leave the stream out for the host-blocking form");
  Client::Impl& client = *impl_->client;
  shm::CollectiveArgs args{call.opcode,    impl_->id, shm::kNoBuffer, 0,
                           shm::kNoBuffer, 0,         call.bytes,     call.root};
  std::optional<BufferLocation> from, to;
  HeldRegistrations held;  // the client's cache is looked up only for memory no Buffer holds
  if (call.send_significant) {
    from = locate_range(client, held, call.name, "send", call.send, call.send_bytes);
    args.send_buffer = from->buffer_id;
    args.send_offset = from->offset;
  }
  if (call.recv_significant) {
    to = locate_range(client, held, call.name, "receive", call.recv, call.recv_bytes);
    args.recv_buffer = to->buffer_id;
    args.recv_offset = to->offset;
  }
  shm::SubmitEntry entry = shm::collective_entry(args);
  if (!stream) return client.submit(entry, &impl_->next_seq, std::nullopt, {}, call.v_args, &held);
  entry.flags |= shm::kStreamOrdered;
  // The caller's stream copies the rank's block to itself when both sides are its GPU memory:
  // done by irisd, that same-GPU copy would run on SMs in irisd's context, and the GPU would
  // switch contexts for it (~280 us measured on the H200; docs/PERFORMANCE.md). Overlapping
  // ranges (in place, or invalid) are left to irisd.
  std::optional<Client::Impl::StreamCopy> own_block;
  if (call.self_bytes != 0 && from && to && from->gpu && to->gpu &&
      disjoint(call.send, call.send_bytes, call.recv, call.recv_bytes)) {
    entry.flags |= shm::kOwnBlockCopiedByClient;
    own_block = Client::Impl::StreamCopy{call.self_dst, call.self_src, call.self_bytes};
  }
  const GpuStream on{stream.handle(),
                     stream.kind() == Stream::Kind::kHip ? GpuVendor::kHip : GpuVendor::kCuda};
  return client.submit(entry, &impl_->next_seq, on, own_block, call.v_args, &held);
}

void Communicator::destroy() {
  if (!impl_ || impl_->destroyed) return;
  impl_->destroyed = true;
  if (impl_->client->detached || impl_->client->daemon_gone()) return;
  v1::SessionRequest request;
  request.mutable_comm_destroy()->set_comm_id(impl_->id);
  impl_->client->session_call(request, "communicator destroy");
}

}  // namespace iris
