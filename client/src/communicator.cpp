#include "iris/communicator.hpp"

#include "client/src/client_impl.hpp"
#include "iris/shared/checked_range.hpp"

namespace iris {

struct Communicator::Impl {
  std::shared_ptr<Client::Impl> client;
  uint64_t id;
  uint32_t nranks;
  uint32_t rank;
  std::atomic<uint64_t> next_seq{1};
  bool destroyed = false;
};

Communicator Communicator::init(Client& client, const std::string& key, uint32_t nranks,
                                uint32_t rank) {
  v1::CommInitRequest request;
  request.set_key(key);
  request.set_nranks(nranks);
  request.set_rank(rank);
  const auto response =
      client.impl_->channel.call(&v1::Control::Stub::CommInit, request, "communicator init");
  auto impl = std::make_unique<Impl>();
  impl->client = client.impl_;
  impl->id = response.comm_id();
  impl->nranks = nranks;
  impl->rank = rank;
  return Communicator(std::move(impl));
}

Communicator::Communicator() = default;
Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Communicator::Communicator(Communicator&&) noexcept = default;
Communicator& Communicator::operator=(Communicator&&) noexcept = default;
Communicator::~Communicator() = default;

uint32_t Communicator::rank() const { return impl_->rank; }
uint32_t Communicator::nranks() const { return impl_->nranks; }
uint64_t Communicator::id() const { return impl_->id; }

Request Communicator::all_gather(const void* send, void* recv, std::size_t bytes) {
  return submit_all_gather(send, recv, bytes, nullptr);
}

namespace {
void require_stream(const void* stream) {
  if (stream == nullptr)
    throw Error(ErrorCode::kInvalidArgument,
                "stream-ordered all_gather needs a stream (the legacy default stream is not "
                "supported); use the host-blocking overload without one");
}
}  // namespace

Request Communicator::all_gather(const void* send, void* recv, std::size_t bytes,
                                 CUstream_st* stream) {
  require_stream(stream);
  const GpuStream on{stream, GpuVendor::kCuda};
  return submit_all_gather(send, recv, bytes, &on);
}

Request Communicator::all_gather(const void* send, void* recv, std::size_t bytes,
                                 ihipStream_t* stream) {
  require_stream(stream);
  const GpuStream on{stream, GpuVendor::kHip};
  return submit_all_gather(send, recv, bytes, &on);
}

Request Communicator::submit_all_gather(const void* send, void* recv, std::size_t bytes,
                                        const GpuStream* stream) {
  if (!impl_ || impl_->destroyed)
    throw Error(ErrorCode::kInvalidArgument, "all_gather on a destroyed communicator");
  Client::Impl& client = *impl_->client;
  const auto from = client.locate(send);
  const auto to = client.locate(recv);
  if (!from)
    throw Error(ErrorCode::kNotFound, "send pointer is not inside a buffer from Client::allocate");
  if (!to)
    throw Error(ErrorCode::kNotFound,
                "receive pointer is not inside a buffer from Client::allocate");
  const auto recv_bytes = checked_mul(bytes, impl_->nranks);
  if (bytes > from->available || !recv_bytes || *recv_bytes > to->available)
    throw Error(ErrorCode::kOutOfRange, "all_gather of " + std::to_string(bytes) + " bytes x " +
                                            std::to_string(impl_->nranks) +
                                            " ranks runs past the end of its buffer");
  const auto opcode =
      stream != nullptr ? shm::Opcode::kAllGatherStreamOrdered : shm::Opcode::kAllGather;
  // seq is filled in under the submission lock.
  shm::SubmitEntry entry = shm::all_gather_entry(opcode, impl_->id, 0, from->buffer_id,
                                                 from->offset, to->buffer_id, to->offset, bytes);
  if (stream == nullptr) return client.submit(entry, &impl_->next_seq);
  // The caller's stream copies its own block when both sides are its GPU memory: done by irisd,
  // that same-GPU copy would run on SMs in irisd's context, and the GPU would switch contexts
  // for it (~280 us measured on the H200; docs/PERFORMANCE.md). Overlapping ranges are left to
  // irisd to reject.
  auto* own = static_cast<char*>(recv) + uint64_t{impl_->rank} * bytes;
  const auto* from_bytes = static_cast<const char*>(send);
  const bool disjoint = from_bytes + bytes <= static_cast<char*>(recv) ||
                        static_cast<char*>(recv) + *recv_bytes <= from_bytes;
  std::optional<Client::Impl::StreamCopy> own_block;
  if (bytes != 0 && from->gpu && to->gpu && disjoint) {
    entry.flags |= shm::kOwnBlockCopiedByClient;
    own_block = Client::Impl::StreamCopy{own, send, bytes};
  }
  return client.submit(entry, &impl_->next_seq, *stream, own_block);
}

void Communicator::destroy() {
  if (!impl_ || impl_->destroyed) return;
  impl_->destroyed = true;
  if (impl_->client->detached || impl_->client->daemon_gone()) return;
  v1::CommDestroyRequest request;
  request.set_comm_id(impl_->id);
  impl_->client->channel.call(&v1::Control::Stub::CommDestroy, request, "communicator destroy");
}

}  // namespace iris
