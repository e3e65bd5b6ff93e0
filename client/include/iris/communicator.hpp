// A communicator: nranks sessions, possibly in different processes, that agree on a key.
// Collectives are matched across ranks by their order of submission on the communicator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "iris/request.hpp"

namespace iris {

class Client;
struct GpuStream;

}  // namespace iris

struct CUstream_st;   // cudaStream_t and CUstream point to it
struct ihipStream_t;  // hipStream_t points to it (AMD)

namespace iris {

class Communicator {
 public:
  struct Impl;
  // Joins (or creates) the communicator `key` as `rank` of `nranks`. Returns at once: the other
  // ranks may join later, and collectives wait for them.
  static Communicator init(Client& client, const std::string& key, uint32_t nranks, uint32_t rank);

  Communicator();
  Communicator(Communicator&&) noexcept;
  Communicator& operator=(Communicator&&) noexcept;
  ~Communicator();

  // ncclAllGather semantics: `bytes` from `send` land at recv + rank*bytes on every rank.
  // In place when send == recv + rank*bytes. Both pointers must lie in buffers from
  // Client::allocate. Returns at once; blocks only while this client has ring_depth requests in
  // flight (then up to ClientOptions::submit_timeout, after which it throws kBusy).
  Request all_gather(const void* send, void* recv, std::size_t bytes);
  // Stream-ordered (cuda engine): returns at once; the copies start once `stream` reaches this
  // point (kernels before it have produced `send`), and work queued on `stream` after it runs
  // once every block has landed. The Request completes then too; errors show there (the stream
  // itself goes on). The stream's GPU must be the one `send` and `recv` live on or can reach.
  Request all_gather(const void* send, void* recv, std::size_t bytes, CUstream_st* stream);
  // The same on a HIP stream (hsa engine, AMD GPUs), with hipStreamWriteValue32 and
  // hipStreamWaitValue32. A client orders on one vendor's streams.
  Request all_gather(const void* send, void* recv, std::size_t bytes, ihipStream_t* stream);

  uint32_t rank() const;
  uint32_t nranks() const;
  uint64_t id() const;
  // Leaves the communicator; the other ranks' later collectives fail with kPeerLost.
  void destroy();

 private:
  explicit Communicator(std::unique_ptr<Impl> impl);
  // `stream` null: host-blocking.
  Request submit_all_gather(const void* send, void* recv, std::size_t bytes,
                            const GpuStream* stream);
  std::unique_ptr<Impl> impl_;
};

}  // namespace iris
