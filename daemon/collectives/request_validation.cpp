#include "daemon/collectives/request_validation.hpp"

#include <algorithm>
#include <cstring>

#include "daemon/engines/engine.hpp"
#include "iris/shared/checked_range.hpp"

namespace iris::daemon {

namespace {

using Result = std::variant<ValidatedRequest, ValidationError>;

ValidationError error(ErrorCode code, std::string message) { return {code, std::move(message)}; }

std::string range_text(uint64_t offset, uint64_t bytes) {
  return "[" + std::to_string(offset) + ", +" + std::to_string(bytes) + ")";
}

// A [offset, +length) range inside one registered buffer, checked against its size.
std::optional<ValidationError> check_range(const char* what, const MappedBuffer& buffer,
                                           uint64_t offset, std::optional<uint64_t> length) {
  if (!length || !range_within(offset, *length, buffer.bytes))
    return error(ErrorCode::kOutOfRange,
                 std::string(what) + " range " +
                     (length ? range_text(offset, *length) : "of more than 2^64 bytes") +
                     " is past the end of buffer " + std::to_string(buffer.id) + " (" +
                     std::to_string(buffer.bytes) + " bytes)");
  return std::nullopt;
}

struct Block {
  uint64_t offset;
  uint64_t bytes;
};

// Sorted by offset, zero-byte blocks dropped.
std::vector<Block> sorted_blocks(uint64_t base, const std::vector<uint64_t>& counts,
                                 const std::vector<uint64_t>& displs) {
  std::vector<Block> blocks;
  for (std::size_t i = 0; i < counts.size(); ++i)
    if (counts[i] != 0) blocks.push_back({base + displs[i], counts[i]});
  std::sort(blocks.begin(), blocks.end(),
            [](const Block& a, const Block& b) { return a.offset < b.offset; });
  return blocks;
}

// Whether any block of `a` shares a byte with any block of `b` (both sorted), in O(n).
bool any_overlap(const std::vector<Block>& a, const std::vector<Block>& b) {
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (ranges_overlap(a[i].offset, a[i].bytes, b[j].offset, b[j].bytes)) return true;
    if (a[i].offset + a[i].bytes <= b[j].offset + b[j].bytes) {
      ++i;
    } else {
      ++j;
    }
  }
  return false;
}

std::optional<ValidationError> read_v_args(const shm::SubmitEntry& e, uint32_t nranks,
                                           const BufferLookup& lookup, RankArgs& args) {
  auto area = lookup(e.args_buffer);
  if (!area)
    return error(ErrorCode::kNotFound, "all_to_all_v argument buffer " +
                                           std::to_string(e.args_buffer) +
                                           " is not registered by this session");
  if (area->device != kHostMemory)
    return error(ErrorCode::kInvalidArgument,
                 "all_to_all_v arguments must be in a host buffer from allocate()");
  const uint64_t array_bytes = uint64_t{nranks} * sizeof(uint64_t);
  if (auto bad = check_range("all_to_all_v argument", *area, e.args_offset, 4 * array_bytes))
    return bad;
  std::vector<uint64_t>* arrays[] = {&args.send_counts, &args.send_displs, &args.recv_counts,
                                     &args.recv_displs};
  const std::byte* from = area->base + e.args_offset;
  for (auto* array : arrays) {
    array->resize(nranks);
    std::memcpy(array->data(), from, array_bytes);
    from += array_bytes;
  }
  return std::nullopt;
}

// Every (displacement, count) block inside its buffer; receive blocks disjoint (each byte written
// once); no receive block over a send block of the same buffer (a copy would overwrite another's
// source).
std::optional<ValidationError> check_v_blocks(const RankArgs& a, const MappedBuffer& send,
                                              const MappedBuffer& recv) {
  for (std::size_t j = 0; j < a.send_counts.size(); ++j) {
    const auto start = checked_add(a.send_offset, a.send_displs[j]);
    if (!start || !range_within(*start, a.send_counts[j], send.bytes))
      return error(ErrorCode::kOutOfRange,
                   "all_to_all_v send block for rank " + std::to_string(j) + " (displacement " +
                       std::to_string(a.send_displs[j]) + ", " + std::to_string(a.send_counts[j]) +
                       " bytes) is past the end of buffer " + std::to_string(send.id));
    const auto at = checked_add(a.recv_offset, a.recv_displs[j]);
    if (!at || !range_within(*at, a.recv_counts[j], recv.bytes))
      return error(ErrorCode::kOutOfRange,
                   "all_to_all_v receive block for rank " + std::to_string(j) + " (displacement " +
                       std::to_string(a.recv_displs[j]) + ", " + std::to_string(a.recv_counts[j]) +
                       " bytes) is past the end of buffer " + std::to_string(recv.id));
  }
  const auto recv_blocks = sorted_blocks(a.recv_offset, a.recv_counts, a.recv_displs);
  for (std::size_t i = 1; i < recv_blocks.size(); ++i)
    if (recv_blocks[i - 1].offset + recv_blocks[i - 1].bytes > recv_blocks[i].offset)
      return error(ErrorCode::kInvalidArgument, "all_to_all_v receive blocks overlap (at offset " +
                                                    std::to_string(recv_blocks[i].offset) +
                                                    "): each byte may be written once");
  if (send.id == recv.id &&
      any_overlap(sorted_blocks(a.send_offset, a.send_counts, a.send_displs), recv_blocks))
    return error(ErrorCode::kInvalidArgument,
                 "all_to_all_v send and receive blocks overlap (in place is not supported)");
  return std::nullopt;
}

}  // namespace

Result validate_request(const shm::SubmitEntry& e, uint32_t nranks, uint32_t rank,
                        const BufferLookup& lookup) {
  if (nranks == 0 || rank >= nranks)
    return error(ErrorCode::kInvalidArgument, "rank out of range for the communicator");
  const shm::CollectiveShape* shape = shm::shape_of(e.opcode);
  if (shape == nullptr)
    return error(ErrorCode::kInvalidArgument, "unknown opcode " + std::to_string(e.opcode));
  if ((e.flags & ~shm::kKnownSubmitFlags) != 0)
    return error(ErrorCode::kInvalidArgument, "unknown request flags " + std::to_string(e.flags) +
                                                  " (a libiris newer than this irisd?)");
  const bool stream_ordered = (e.flags & shm::kStreamOrdered) != 0;
  if ((e.flags & shm::kOwnBlockCopiedByClient) != 0 && !stream_ordered)
    return error(ErrorCode::kInvalidArgument,
                 "only stream-ordered requests may copy their own block themselves");
  if (shape->rooted && e.root >= nranks)
    return error(ErrorCode::kInvalidArgument, "root " + std::to_string(e.root) +
                                                  " is out of range for " + std::to_string(nranks) +
                                                  " ranks");
  const uint32_t root = shape->rooted ? e.root : 0;

  ValidatedRequest out;
  out.stream_ordered = stream_ordered;
  RankArgs& a = out.args;
  a.kind = shape->opcode;
  a.root = root;
  if (shape->send.extent == shm::Extent::kNone) return out;  // a barrier names no buffer
  a.bytes = e.bytes;
  // One buffer (broadcast) is named by every rank as its receive range, which is also the send.
  const bool has_send = shape->send.significant(rank, root) && !shape->one_buffer;
  const bool has_recv = shape->recv.significant(rank, root);
  if (has_send) {
    out.send = lookup(e.send_buffer);
    if (!out.send)
      return error(ErrorCode::kNotFound, "send buffer " + std::to_string(e.send_buffer) +
                                             " is not registered by this session");
    a.send_offset = e.send_offset;
  }
  if (has_recv) {
    out.recv = lookup(e.recv_buffer);
    if (!out.recv)
      return error(ErrorCode::kNotFound, "receive buffer " + std::to_string(e.recv_buffer) +
                                             " is not registered by this session");
    a.recv_offset = e.recv_offset;
  }
  if (shape->one_buffer) {
    if (e.recv_buffer != e.send_buffer || e.recv_offset != e.send_offset)
      return error(
          ErrorCode::kInvalidArgument,
          std::string(shape->name) + " takes one buffer: the receive range must be the send range");
    out.send = out.recv;
    a.send_offset = e.recv_offset;
  }

  if (shape->send.extent == shm::Extent::kPerPeerCounts) {
    if (auto bad = read_v_args(e, nranks, lookup, a)) return *bad;
    if (auto bad = check_v_blocks(a, *out.send, *out.recv)) return *bad;
    return out;
  }

  const auto send_bytes = shm::range_bytes(shape->send, nranks, e.bytes);
  const auto recv_bytes = shm::range_bytes(shape->recv, nranks, e.bytes);
  if (out.send)
    if (auto bad = check_range("send", *out.send, e.send_offset, send_bytes)) return *bad;
  if (out.recv)
    if (auto bad = check_range("receive", *out.recv, e.recv_offset, recv_bytes)) return *bad;

  // In place where NCCL and MPI define it: the own block's source is its destination. Any other
  // overlap would let one copy overwrite another's source.
  if (has_send && has_recv && out.send->id == out.recv->id) {
    // No overflow: the own block lies inside the ranges checked above.
    const auto own = shm::pair_block(*shape, rank, rank, root, e.bytes);
    const bool in_place = shape->in_place_allowed && own &&
                          e.send_offset + own->send_offset == e.recv_offset + own->recv_offset;
    if (!in_place && ranges_overlap(e.send_offset, *send_bytes, e.recv_offset, *recv_bytes))
      return error(ErrorCode::kInvalidArgument,
                   std::string(shape->name) +
                       ": send range overlaps the receive range but is not in place (" +
                       (!shape->in_place_allowed
                            ? "in-place " + std::string(shape->name) + " is not supported"
                        : shape->send.extent == shm::Extent::kBlockPerRank
                            ? std::string("in place needs recv == send + rank * bytes")
                            : std::string("in place needs send == recv + rank * bytes")) +
                       ")");
    a.self_copy_done = in_place;
  }
  if ((e.flags & shm::kOwnBlockCopiedByClient) != 0) a.self_copy_done = true;
  return out;
}

}  // namespace iris::daemon
