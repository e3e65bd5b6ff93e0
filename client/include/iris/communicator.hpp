// A communicator: nranks sessions, possibly in different processes, that agree on a key.
// Collectives are matched across ranks by their order of submission on the communicator: every
// rank must call the same collectives, with agreeing arguments, in the same order.
//
// Every collective returns a Request at once (wait() on it for the blocking form). It blocks
// only while this client has ring_depth requests in flight (then up to
// ClientOptions::submit_timeout, after which it throws kBusy). In flight means not completed by
// irisd: Requests kept without waiting hold nothing once their collective completed (the next
// call takes their slots back, and each Request keeps its result). Pointers must lie in buffers
// from Client::allocate or registered GPU memory. With a `stream`, the collective is ordered on
// that GPU stream: the copies start once the stream reaches the call (kernels before it have
// produced the send data), and work queued on the stream after it runs once every block has
// landed; the Request completes then too and carries errors (the stream itself goes on).
//
// CUDA graphs: called while `stream` is capturing (cudaStreamBeginCapture, torch.cuda.graph),
// a collective becomes part of the graph: irisd keeps it as a persistent plan (communicator,
// buffers, offsets and sizes fixed at capture) and runs it each time a replay reaches it, with
// no host call per replay. Every rank must capture the same collectives in the same order and
// replay its graphs as often as the others. The call returns an empty Request (the graph waits,
// not the host); Client::check_graphs() reports failed replays. The plan goes when the graph is
// destroyed. Not yet on HIP streams (refused at capture).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "iris/request.hpp"
#include "iris/stream.hpp"

namespace iris {

class Client;
struct CollectiveCall;

// The nodes of a communicator across several irisd daemons (docs/SCALE-OUT.md). The job gathers
// every node's Client::node_address() with its own means (an MPI all-gather, torch's TCPStore)
// and makes a random secret; every rank passes the same NodeSet.
struct NodeSet {
  std::vector<std::string> addresses;  // by node: Client::node_address() of its irisd
  std::vector<uint32_t> node_of_rank;  // by rank: its node's index in `addresses`
  std::string secret;                  // 16 to 1024 random bytes made by the job
  // How long init waits for every node's irisd to have a rank of the communicator.
  std::chrono::milliseconds join_timeout{60'000};
};

// The NodeSet of a job whose ranks share only a meeting point (HOST:PORT of one node's irisd,
// its Client::meeting_point()) and a secret of kMeetingSecretBytes random bytes: each rank tells
// the meeting point its node (its client's node_address(), which starts UCX there) and gets every
// rank's once all nranks have come; nodes are numbered by their lowest rank. The secret names
// the job there and becomes the NodeSet's. Throws kTimeout after `timeout`, kUnavailable when the
// meeting point cannot be reached or hangs up, its refusals (kNranksMismatch, kAlreadyExists,
// kLimitExceeded) with the reason, and kCancelled within 10 ms of `*stop` becoming true (another
// thread giving up on a rank that waits here).
inline constexpr std::size_t kMeetingSecretBytes = 32;
NodeSet meet_nodes(Client& client, const std::string& meeting_point, const std::string& secret,
                   uint32_t nranks, uint32_t rank,
                   std::chrono::milliseconds timeout = std::chrono::minutes(5),
                   const std::atomic<bool>* stop = nullptr);

// Where a communicator's copies wait while users share the node's copy engines (irisd hands
// them the waiting copies latency work first, bulk fairly between users; docs/OPERATIONS.md):
// kAuto by size (collectives whose copies are all at most irisd's --latency-max-bytes are
// latency work), kLatency (beyond that size only for users irisd grants it, --latency-uids;
// others keep the size rule), kBulk (always: a transfer that should yield to others).
enum class TrafficClass : uint8_t { kAuto = 0, kLatency = 1, kBulk = 2 };

// What a communicator is made with besides its key, ranks and nodes.
struct CommOptions {
  // NCCL's watchdog: a collective that waits this long for a rank breaks the communicator on
  // every rank (kTimeout naming the ranks it waits on: every later call fails too, re-create
  // it), and a send or receive not matched this long fails alone (kTimeout). Streams waiting on
  // them go on. 0: none (sends and receives still end at irisd's --p2p-timeout-ms). The rank
  // that creates the communicator chooses it; the others' values are not used.
  std::chrono::milliseconds op_timeout{0};
  // The rank that creates the communicator chooses it, as op_timeout.
  TrafficClass traffic_class = TrafficClass::kAuto;
};

class Communicator {
 public:
  struct Impl;
  // Joins (or creates) the communicator `key` as `rank` of `nranks`. Returns at once: the other
  // ranks may join later, and collectives wait for them.
  static Communicator init(Client& client, const std::string& key, uint32_t nranks, uint32_t rank,
                           const CommOptions& options = {});
  // The same across nodes: returns once every node's irisd has a rank of it (kTimeout naming the
  // nodes missing after nodes.join_timeout; kCancelled within 20 ms of `*stop` becoming true).
  // Throws kInvalidArgument for a NodeSet this node's irisd is not in, or that disagrees with the
  // one its other ranks passed.
  static Communicator init(Client& client, const std::string& key, uint32_t nranks, uint32_t rank,
                           const NodeSet& nodes, const CommOptions& options = {},
                           const std::atomic<bool>* stop = nullptr);

  Communicator();
  Communicator(Communicator&&) noexcept;
  Communicator& operator=(Communicator&&) noexcept;
  ~Communicator();

  // ncclAllGather: `bytes` from `send` land at recv + rank*bytes on every rank. In place when
  // send == recv + rank*bytes.
  Request all_gather(const void* send, void* recv, std::size_t bytes, Stream stream = {});
  // ncclAlltoAll / MPI_Alltoall: block j (bytes_per_peer at send + j*bytes_per_peer) goes to
  // rank j, landing at its recv + rank*bytes_per_peer. Not in place.
  Request all_to_all(const void* send, void* recv, std::size_t bytes_per_peer, Stream stream = {});
  // MPI_Alltoallv in bytes: send_counts[j] bytes from send + send_displs[j] land at rank j's
  // recv + recv_displs[rank]; what rank i sends to j must equal what j expects from i
  // (recv_counts[i]), else every rank gets kSizeMismatch. Each vector has nranks entries. Not in
  // place; receive blocks must not overlap.
  Request all_to_all_v(const void* send, const std::vector<uint64_t>& send_counts,
                       const std::vector<uint64_t>& send_displs, void* recv,
                       const std::vector<uint64_t>& recv_counts,
                       const std::vector<uint64_t>& recv_displs, Stream stream = {});
  // ncclBroadcast in place (one buffer): root's `bytes` at buf land in every rank's buf.
  Request broadcast(void* buf, std::size_t bytes, uint32_t root, Stream stream = {});
  // MPI_Gather: `bytes` from each rank's send land at root's recv + rank*bytes. recv is
  // significant at the root only (others may pass nullptr). In place at the root when
  // send == recv + root*bytes.
  Request gather(const void* send, void* recv, std::size_t bytes, uint32_t root,
                 Stream stream = {});
  // MPI_Scatter: root's send + rank*bytes lands in each rank's recv. send is significant at the
  // root only (others may pass nullptr). In place at the root when recv == send + root*bytes.
  Request scatter(const void* send, void* recv, std::size_t bytes, uint32_t root,
                  Stream stream = {});
  // Returns once every rank has called barrier(): a collective that moves nothing and needs no
  // buffer. Throws the collective's error (kPeerLost when a rank left).
  void barrier();

  // Point to point: `bytes` at `buf` go to rank `peer`'s matching recv, and recv takes them.
  // Sends and receives are matched in order per (communicator, source, destination), as NCCL
  // and MPI match them; a send and its receive must have the same size (else both fail with
  // size_mismatch naming the two). `peer` may be this rank. Host-blocking (no stream: wait on
  // the Request) or ordered on `stream`; stream-ordered sends and receives that depend on each
  // other (a pipeline's exchange, a send to self) go in one group (iris/group.hpp), or the
  // stream waits for a send whose receive it has not reached yet. irisd fails a side its peer
  // never matches with timeout (--p2p-timeout-ms). Not yet across nodes or in CUDA graphs.
  Request send(const void* buf, std::size_t bytes, uint32_t peer, Stream stream = {});
  Request recv(void* buf, std::size_t bytes, uint32_t peer, Stream stream = {});

  uint32_t rank() const;
  uint32_t nranks() const;
  uint64_t id() const;
  // Leaves the communicator; the other ranks' later collectives fail with kPeerLost.
  void destroy();

 private:
  explicit Communicator(std::unique_ptr<Impl> impl);
  Request submit(const CollectiveCall& call, Stream stream);
  std::unique_ptr<Impl> impl_;
};

}  // namespace iris
