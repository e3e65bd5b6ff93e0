#include "daemon/descriptor_validation.hpp"

#include <gtest/gtest.h>

#include <limits>
#include <vector>

namespace iris::daemon {
namespace {

class Validation : public ::testing::Test {
 protected:
  std::vector<std::byte> send_mem = std::vector<std::byte>(100);
  std::vector<std::byte> recv_mem = std::vector<std::byte>(400);
  std::shared_ptr<MappedBuffer> send =
      std::make_shared<MappedBuffer>(MappedBuffer{1, 1, send_mem.data(), 100, nullptr});
  std::shared_ptr<MappedBuffer> recv =
      std::make_shared<MappedBuffer>(MappedBuffer{2, 1, recv_mem.data(), 400, nullptr});
  BufferLookup lookup = [this](uint64_t id) -> std::shared_ptr<MappedBuffer> {
    if (id == 1) return send;
    if (id == 2) return recv;
    return nullptr;
  };

  static shm::SubmitEntry gather(uint64_t send_id, uint64_t send_off, uint64_t recv_id,
                                 uint64_t recv_off, uint64_t bytes) {
    return shm::all_gather_entry(shm::Opcode::kAllGather, 1, 1, send_id, send_off, recv_id,
                                 recv_off, bytes);
  }

  ErrorCode code_of(const shm::SubmitEntry& e, uint32_t nranks = 4, uint32_t rank = 1) {
    auto r = validate_all_gather(e, nranks, rank, lookup);
    if (auto* err = std::get_if<ValidationError>(&r)) {
      EXPECT_FALSE(err->message.empty());
      return err->code;
    }
    return ErrorCode::kOk;
  }
};

TEST_F(Validation, AcceptsExactFitAndComputesPointers) {
  auto r = validate_all_gather(gather(1, 0, 2, 0, 100), 4, 1, lookup);
  ASSERT_TRUE(std::holds_alternative<ValidatedAllGather>(r));
  const auto& plan = std::get<ValidatedAllGather>(r);
  EXPECT_EQ(plan.send_ptr, send_mem.data());
  EXPECT_EQ(plan.recv_ptr, recv_mem.data());
  EXPECT_FALSE(plan.in_place);
  EXPECT_EQ(code_of(gather(1, 10, 2, 0, 90)), ErrorCode::kOk);
}

TEST_F(Validation, OwnBlockFlagOnlyForStreamOrderedRequestsAndUnknownFlagsRefused) {
  shm::SubmitEntry e = gather(1, 0, 2, 0, 100);
  e.flags = shm::kOwnBlockCopiedByClient;
  EXPECT_EQ(code_of(e), ErrorCode::kInvalidArgument) << "host-blocking: irisd copies every block";
  e.opcode = static_cast<uint32_t>(shm::Opcode::kAllGatherStreamOrdered);
  auto r = validate_all_gather(e, 4, 1, lookup);
  ASSERT_TRUE(std::holds_alternative<ValidatedAllGather>(r));
  EXPECT_TRUE(std::get<ValidatedAllGather>(r).own_block_copied);
  e.flags = 1u << 7;
  EXPECT_EQ(code_of(e), ErrorCode::kInvalidArgument);
  e.flags = 0;
  r = validate_all_gather(e, 4, 1, lookup);
  EXPECT_FALSE(std::get<ValidatedAllGather>(r).own_block_copied);
}

TEST_F(Validation, UnknownBuffersAreNotFound) {
  EXPECT_EQ(code_of(gather(9, 0, 2, 0, 1)), ErrorCode::kNotFound);
  EXPECT_EQ(code_of(gather(1, 0, 9, 0, 1)), ErrorCode::kNotFound);
}

TEST_F(Validation, RangesPastTheEndAreOutOfRange) {
  EXPECT_EQ(code_of(gather(1, 1, 2, 0, 100)), ErrorCode::kOutOfRange);  // send one byte over
  EXPECT_EQ(code_of(gather(1, 0, 2, 1, 100)), ErrorCode::kOutOfRange);  // recv one byte over
  EXPECT_EQ(code_of(gather(1, 101, 2, 0, 0)), ErrorCode::kOutOfRange);  // offset past end
}

TEST_F(Validation, OverflowingArithmeticIsOutOfRange) {
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  EXPECT_EQ(code_of(gather(1, max, 2, 0, 2)), ErrorCode::kOutOfRange);  // offset + bytes wraps
  EXPECT_EQ(code_of(gather(1, 0, 2, max - 1, 1)), ErrorCode::kOutOfRange);
  // bytes * nranks wraps to a small number: must not pass as "fits".
  EXPECT_EQ(code_of(gather(1, 0, 2, 0, (max / 4) + 2)), ErrorCode::kOutOfRange);
  EXPECT_EQ(code_of(gather(1, 0, 2, 0, uint64_t{1} << 62)), ErrorCode::kOutOfRange);
}

TEST_F(Validation, RankOutOfRangeIsInvalid) {
  EXPECT_EQ(code_of(gather(1, 0, 2, 0, 1), 4, 4), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of(gather(1, 0, 2, 0, 1), 0, 0), ErrorCode::kInvalidArgument);
}

TEST_F(Validation, InPlaceIsDetectedAndOtherOverlapRejected) {
  // rank 1 of 4, 50 bytes each, recv at offset 100 of buffer 2: own block at 150.
  auto r = validate_all_gather(gather(2, 150, 2, 100, 50), 4, 1, lookup);
  ASSERT_TRUE(std::holds_alternative<ValidatedAllGather>(r));
  EXPECT_TRUE(std::get<ValidatedAllGather>(r).in_place);
  EXPECT_EQ(code_of(gather(2, 151, 2, 100, 50)), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of(gather(2, 100, 2, 100, 50)), ErrorCode::kInvalidArgument);  // rank 0's block
  EXPECT_EQ(code_of(gather(2, 0, 2, 100, 50)), ErrorCode::kOk);  // same buffer, disjoint
}

TEST_F(Validation, ZeroBytesIsAValidCollective) {
  EXPECT_EQ(code_of(gather(1, 100, 2, 400, 0)), ErrorCode::kOk);
}

}  // namespace
}  // namespace iris::daemon
