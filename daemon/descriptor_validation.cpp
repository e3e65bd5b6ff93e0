#include "daemon/descriptor_validation.hpp"

#include "iris/shared/checked_range.hpp"

namespace iris::daemon {

namespace {
ValidationError error(ErrorCode code, std::string message) { return {code, std::move(message)}; }
}  // namespace

std::variant<ValidatedAllGather, ValidationError> validate_all_gather(const shm::SubmitEntry& entry,
                                                                      uint32_t nranks,
                                                                      uint32_t rank,
                                                                      const BufferLookup& lookup) {
  if (nranks == 0 || rank >= nranks)
    return error(ErrorCode::kInvalidArgument, "rank out of range for the communicator");
  if ((entry.flags & ~shm::kKnownSubmitFlags) != 0)
    return error(ErrorCode::kInvalidArgument, "unknown request flags " +
                                                  std::to_string(entry.flags) +
                                                  " (a libiris newer than this irisd?)");
  if ((entry.flags & shm::kOwnBlockCopiedByClient) != 0 &&
      entry.opcode != static_cast<uint32_t>(shm::Opcode::kAllGatherStreamOrdered))
    return error(ErrorCode::kInvalidArgument,
                 "only stream-ordered requests may copy their own block themselves");
  auto send = lookup(entry.send_buffer);
  if (!send)
    return error(ErrorCode::kNotFound, "send buffer " + std::to_string(entry.send_buffer) +
                                           " is not registered by this session");
  auto recv = lookup(entry.recv_buffer);
  if (!recv)
    return error(ErrorCode::kNotFound, "receive buffer " + std::to_string(entry.recv_buffer) +
                                           " is not registered by this session");
  if (!range_within(entry.send_offset, entry.bytes, send->bytes))
    return error(ErrorCode::kOutOfRange,
                 "send range [" + std::to_string(entry.send_offset) + ", +" +
                     std::to_string(entry.bytes) + ") is past the end of buffer " +
                     std::to_string(send->id) + " (" + std::to_string(send->bytes) + " bytes)");
  const auto recv_bytes = checked_mul(entry.bytes, nranks);
  if (!recv_bytes || !range_within(entry.recv_offset, *recv_bytes, recv->bytes))
    return error(ErrorCode::kOutOfRange,
                 "receive range of " + std::to_string(nranks) + " x " +
                     std::to_string(entry.bytes) + " bytes at offset " +
                     std::to_string(entry.recv_offset) + " is past the end of buffer " +
                     std::to_string(recv->id) + " (" + std::to_string(recv->bytes) + " bytes)");

  // In place when send is exactly this rank's block of recv (ncclAllGather's rule). Any other
  // overlap would let one copy overwrite another's source.
  bool in_place = false;
  if (send->id == recv->id) {
    const uint64_t own_block = entry.recv_offset + uint64_t{rank} * entry.bytes;  // no overflow:
    in_place = entry.send_offset == own_block;  // within recv_bytes checked above
    if (!in_place && ranges_overlap(entry.send_offset, entry.bytes, entry.recv_offset, *recv_bytes))
      return error(ErrorCode::kInvalidArgument,
                   "send range overlaps the receive range but is not this rank's block "
                   "(in-place all-gather needs send == recv + rank * bytes)");
  }
  ValidatedAllGather plan;
  plan.send_ptr = send->base + entry.send_offset;
  plan.recv_ptr = recv->base + entry.recv_offset;
  plan.bytes = entry.bytes;
  plan.in_place = in_place;
  plan.own_block_copied = (entry.flags & shm::kOwnBlockCopiedByClient) != 0;
  plan.send = std::move(send);
  plan.recv = std::move(recv);
  return plan;
}

}  // namespace iris::daemon
