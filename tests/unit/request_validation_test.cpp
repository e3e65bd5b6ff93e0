#include "daemon/collectives/request_validation.hpp"

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
    return entry(shm::Opcode::kAllGather, send_id, send_off, recv_id, recv_off, bytes);
  }

  static shm::SubmitEntry entry(shm::Opcode op, uint64_t send_id, uint64_t send_off,
                                uint64_t recv_id, uint64_t recv_off, uint64_t bytes,
                                uint32_t root = 0) {
    auto e = shm::collective_entry(
        {op, 1, send_id, send_off, recv_id, recv_off, bytes, root, shm::kNoBuffer, 0});
    e.seq = 1;
    return e;
  }

  ErrorCode code_of(const shm::SubmitEntry& e, uint32_t nranks = 4, uint32_t rank = 1) {
    auto r = validate_request(e, nranks, rank, lookup);
    if (auto* err = std::get_if<ValidationError>(&r)) {
      EXPECT_FALSE(err->message.empty());
      return err->code;
    }
    return ErrorCode::kOk;
  }
};

TEST_F(Validation, AcceptsExactFitAndKeepsTheOffsets) {
  auto r = validate_request(gather(1, 0, 2, 0, 100), 4, 1, lookup);
  ASSERT_TRUE(std::holds_alternative<ValidatedRequest>(r));
  const auto& plan = std::get<ValidatedRequest>(r);
  EXPECT_EQ(plan.send, send);
  EXPECT_EQ(plan.recv, recv);
  EXPECT_EQ(plan.args.kind, CollectiveKind::kAllGather);
  EXPECT_FALSE(plan.args.self_copy_done);
  EXPECT_EQ(code_of(gather(1, 10, 2, 0, 90)), ErrorCode::kOk);
}

TEST_F(Validation, OwnBlockFlagOnlyForStreamOrderedRequestsAndUnknownFlagsRefused) {
  shm::SubmitEntry e = gather(1, 0, 2, 0, 100);
  e.flags = shm::kOwnBlockCopiedByClient;
  EXPECT_EQ(code_of(e), ErrorCode::kInvalidArgument) << "host-blocking: irisd copies every block";
  e.flags |= shm::kStreamOrdered;
  auto r = validate_request(e, 4, 1, lookup);
  ASSERT_TRUE(std::holds_alternative<ValidatedRequest>(r));
  EXPECT_TRUE(std::get<ValidatedRequest>(r).args.self_copy_done);
  EXPECT_TRUE(std::get<ValidatedRequest>(r).stream_ordered);
  e.flags = 1u << 7;
  EXPECT_EQ(code_of(e), ErrorCode::kInvalidArgument);
  e.flags = shm::kStreamOrdered;
  r = validate_request(e, 4, 1, lookup);
  EXPECT_FALSE(std::get<ValidatedRequest>(r).args.self_copy_done);
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
  auto r = validate_request(gather(2, 150, 2, 100, 50), 4, 1, lookup);
  ASSERT_TRUE(std::holds_alternative<ValidatedRequest>(r));
  EXPECT_TRUE(std::get<ValidatedRequest>(r).args.self_copy_done);
  EXPECT_EQ(code_of(gather(2, 151, 2, 100, 50)), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of(gather(2, 100, 2, 100, 50)), ErrorCode::kInvalidArgument);  // rank 0's block
  EXPECT_EQ(code_of(gather(2, 0, 2, 100, 50)), ErrorCode::kOk);  // same buffer, disjoint
}

TEST_F(Validation, RootedCollectivesCheckOnlyWhatIsSignificantOnTheRank) {
  // gather: rank 1 of 4 is not the root (0): its receive buffer is ignored, even unknown.
  EXPECT_EQ(code_of(entry(shm::Opcode::kGather, 1, 0, 9, 0, 100, 0)), ErrorCode::kOk);
  // as the root it needs 4 x 100 bytes of receive buffer.
  EXPECT_EQ(code_of(entry(shm::Opcode::kGather, 1, 0, 2, 0, 100, 1)), ErrorCode::kOk);
  EXPECT_EQ(code_of(entry(shm::Opcode::kGather, 1, 0, 2, 1, 100, 1)), ErrorCode::kOutOfRange);
  // scatter: the send buffer matters at the root only.
  EXPECT_EQ(code_of(entry(shm::Opcode::kScatter, 9, 0, 1, 0, 100, 0)), ErrorCode::kOk);
  EXPECT_EQ(code_of(entry(shm::Opcode::kScatter, 2, 0, 1, 0, 100, 1)), ErrorCode::kOk);
  EXPECT_EQ(code_of(entry(shm::Opcode::kScatter, 1, 0, 2, 0, 100, 1)), ErrorCode::kOutOfRange);
  // root out of range, and broadcast's one buffer.
  EXPECT_EQ(code_of(entry(shm::Opcode::kBroadcast, 1, 0, 1, 0, 100, 4)),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of(entry(shm::Opcode::kBroadcast, 1, 0, 1, 0, 100, 3)), ErrorCode::kOk);
  EXPECT_EQ(code_of(entry(shm::Opcode::kBroadcast, 1, 0, 2, 0, 100, 3)),
            ErrorCode::kInvalidArgument);
}

TEST_F(Validation, InPlaceOnlyWhereNcclAndMpiDefineIt) {
  // scatter at the root (rank 1): recv == send + 1 * 50 is in place.
  auto r = validate_request(entry(shm::Opcode::kScatter, 2, 100, 2, 150, 50, 1), 4, 1, lookup);
  ASSERT_TRUE(std::holds_alternative<ValidatedRequest>(r));
  EXPECT_TRUE(std::get<ValidatedRequest>(r).args.self_copy_done);
  EXPECT_EQ(code_of(entry(shm::Opcode::kScatter, 2, 100, 2, 100, 50, 1)),
            ErrorCode::kInvalidArgument);
  // gather at the root: send == recv + 1 * 50.
  EXPECT_EQ(code_of(entry(shm::Opcode::kGather, 2, 150, 2, 100, 50, 1)), ErrorCode::kOk);
  // all-to-all has no in-place form.
  EXPECT_EQ(code_of(entry(shm::Opcode::kAllToAll, 2, 0, 2, 0, 50)), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of(entry(shm::Opcode::kAllToAll, 2, 0, 2, 200, 50)), ErrorCode::kOk);
}

TEST_F(Validation, UnknownOpcodeIsInvalid) {
  auto e = gather(1, 0, 2, 0, 1);
  e.opcode = 99;
  EXPECT_EQ(code_of(e), ErrorCode::kInvalidArgument);
  e.opcode = static_cast<uint32_t>(shm::Opcode::kNop);
  EXPECT_EQ(code_of(e), ErrorCode::kInvalidArgument);
}

// all-to-all-v's arrays live in a host buffer of the session (id 3 here).
class ValidationV : public Validation {
 protected:
  static constexpr uint32_t kRanks = 4;
  std::vector<uint64_t> args_mem = std::vector<uint64_t>(4 * kRanks + 8);
  std::shared_ptr<MappedBuffer> args = std::make_shared<MappedBuffer>(
      MappedBuffer{3, 1, reinterpret_cast<std::byte*>(args_mem.data()),
                   args_mem.size() * sizeof(uint64_t), nullptr});
  BufferLookup with_args = [this](uint64_t id) { return id == 3 ? args : lookup(id); };

  // Equal blocks of `count` bytes, packed, for rank 1 of 4.
  void fill(uint64_t count) {
    for (uint32_t j = 0; j < kRanks; ++j) {
      args_mem[j] = count;
      args_mem[kRanks + j] = j * count;
      args_mem[2 * kRanks + j] = count;
      args_mem[3 * kRanks + j] = j * count;
    }
  }
  shm::SubmitEntry v_entry(uint64_t args_offset = 0) {
    auto e = entry(shm::Opcode::kAllToAllV, 1, 0, 2, 0, 0);
    e.args_buffer = 3;
    e.args_offset = args_offset;
    return e;
  }
  ErrorCode v_code(const shm::SubmitEntry& e) {
    auto r = validate_request(e, kRanks, 1, with_args);
    if (auto* err = std::get_if<ValidationError>(&r)) return err->code;
    return ErrorCode::kOk;
  }
};

TEST_F(ValidationV, ArgumentsAreCopiedOutAndChecked) {
  fill(25);
  auto r = validate_request(v_entry(), kRanks, 1, with_args);
  ASSERT_TRUE(std::holds_alternative<ValidatedRequest>(r));
  const RankArgs& a = std::get<ValidatedRequest>(r).args;
  args_mem.assign(args_mem.size(), 0xdead);  // the client rewrites the area afterwards
  EXPECT_EQ(a.send_counts, std::vector<uint64_t>(kRanks, 25));
  EXPECT_EQ(a.recv_displs, (std::vector<uint64_t>{0, 25, 50, 75}));
}

TEST_F(ValidationV, BadArgumentsFailTheRequest) {
  fill(25);
  EXPECT_EQ(v_code(v_entry(8 * sizeof(uint64_t) + 1)), ErrorCode::kOutOfRange)
      << "argument area past the end of its buffer";
  auto e = v_entry();
  e.args_buffer = 7;
  EXPECT_EQ(v_code(e), ErrorCode::kNotFound);
  fill(26);  // 4 x 26 > 100 bytes of send buffer
  EXPECT_EQ(v_code(v_entry()), ErrorCode::kOutOfRange);
  fill(25);
  args_mem[kRanks + 2] = std::numeric_limits<uint64_t>::max();  // displacement overflows
  EXPECT_EQ(v_code(v_entry()), ErrorCode::kOutOfRange);
  fill(25);
  args_mem[3 * kRanks + 1] = 10;  // receive block 1 overlaps block 0
  EXPECT_EQ(v_code(v_entry()), ErrorCode::kInvalidArgument);
  fill(25);
  auto same = v_entry();
  same.recv_buffer = 2;
  same.send_buffer = 2;
  same.recv_offset = 50;  // send blocks [0,100) and receive blocks [50,150) of one buffer
  EXPECT_EQ(v_code(same), ErrorCode::kInvalidArgument);
  same.recv_offset = 100;
  EXPECT_EQ(v_code(same), ErrorCode::kOk);
}

TEST_F(Validation, ZeroBytesIsAValidCollective) {
  EXPECT_EQ(code_of(gather(1, 100, 2, 400, 0)), ErrorCode::kOk);
}

}  // namespace
}  // namespace iris::daemon
