// The meeting point's frames and groups without sockets: every prefix and every corruption of a
// frame is either incomplete or refused (never a crash or a wrong message), and the groups'
// rules (completion, refusals, leaving, expiry, node numbering, the bound on groups).
#include <gtest/gtest.h>

#include <random>

#include "daemon/front/meeting_groups.hpp"
#include "iris/shared/meeting_wire.hpp"

namespace iris {
namespace {

using daemon::MeetingGroups;
using Clock = std::chrono::steady_clock;

meeting::Hello hello(uint8_t job, uint32_t nranks, uint32_t rank, std::string address) {
  meeting::Hello h;
  h.group.fill(job);
  h.nranks = nranks;
  h.rank = rank;
  h.node_address = std::move(address);
  return h;
}

meeting::Answer decoded(const std::string& bytes) {
  meeting::Answer a;
  std::size_t used = 0;
  std::string why;
  EXPECT_EQ(meeting::decode(bytes, a, used, why, 1 << 20), meeting::Take::kDone) << why;
  EXPECT_EQ(used, bytes.size());
  return a;
}

TEST(MeetingWire, AHelloRoundTripsAndEveryPrefixIsIncomplete) {
  const meeting::Hello h = hello(7, 5, 3, std::string(300, 'u'));
  const std::string bytes = meeting::encode(h);
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    meeting::Hello got;
    std::size_t used = 0;
    std::string why;
    EXPECT_EQ(meeting::decode(std::string_view(bytes).substr(0, n), got, used, why),
              meeting::Take::kNeedMore)
        << n;
  }
  meeting::Hello got;
  std::size_t used = 0;
  std::string why;
  ASSERT_EQ(meeting::decode(bytes + "trailing", got, used, why), meeting::Take::kDone);
  EXPECT_EQ(used, bytes.size());
  EXPECT_EQ(got.group, h.group);
  EXPECT_EQ(got.nranks, 5u);
  EXPECT_EQ(got.rank, 3u);
  EXPECT_EQ(got.node_address, h.node_address);
}

TEST(MeetingWire, CorruptedHellosAreRefusedOrIncompleteNeverMisread) {
  const std::string good = meeting::encode(hello(1, 4, 2, "node-a"));
  std::mt19937 random(12345);
  for (int trial = 0; trial < 20000; ++trial) {
    std::string bytes = good;
    const int flips = 1 + static_cast<int>(random() % 4);
    for (int f = 0; f < flips; ++f)
      bytes[random() % bytes.size()] = static_cast<char>(random() & 0xff);
    meeting::Hello got;
    std::size_t used = 0;
    std::string why;
    const meeting::Take t = meeting::decode(bytes, got, used, why);
    if (t == meeting::Take::kDone) {
      // Only the fields themselves may have changed: still a hello within the bounds.
      EXPECT_LE(used, bytes.size());
      EXPECT_LT(got.rank, got.nranks);
      EXPECT_LE(got.nranks, meeting::kMaxRanks);
      EXPECT_FALSE(got.node_address.empty());
    } else if (t == meeting::Take::kBad) {
      EXPECT_FALSE(why.empty());
    }
  }
}

TEST(MeetingWire, BoundsAreChecked) {
  std::string why;
  std::size_t used = 0;
  meeting::Hello h;
  const std::string huge = "\xff\xff\xff\x7firisMEET";
  EXPECT_EQ(meeting::decode(huge, h, used, why), meeting::Take::kBad);
  EXPECT_NE(why.find("at most"), std::string::npos) << why;
  EXPECT_EQ(meeting::decode(std::string("\x20\0\0\0GET / HT", 12), h, used, why),
            meeting::Take::kBad);
  EXPECT_NE(why.find("irisMEET"), std::string::npos) << why;
  EXPECT_EQ(meeting::decode(meeting::encode(hello(1, 4, 4, "n")), h, used, why),
            meeting::Take::kBad);
  EXPECT_EQ(meeting::decode(meeting::encode(hello(1, 0, 0, "n")), h, used, why),
            meeting::Take::kBad);
  EXPECT_EQ(meeting::decode(meeting::encode(hello(1, 2, 0, "")), h, used, why),
            meeting::Take::kBad);
  meeting::Answer a;
  a.addresses = {"x"};
  a.node_of_rank = {0, 1};  // a node it does not list
  meeting::Answer got;
  EXPECT_EQ(meeting::decode(meeting::encode(a), got, used, why, 1 << 20), meeting::Take::kBad);
  a.node_of_rank = {0, 0};
  EXPECT_EQ(meeting::decode(meeting::encode(a), got, used, why, 8), meeting::Take::kBad);
}

TEST(MeetingGroups, TheLastRankCompletesTheGroupAndNodesGoInOrderOfTheirLowestRank) {
  MeetingGroups groups({4, std::chrono::seconds(10)});
  const auto now = Clock::now();
  EXPECT_TRUE(groups.arrive(10, hello(1, 4, 3, "B"), now).empty());
  EXPECT_TRUE(groups.arrive(11, hello(1, 4, 1, "A"), now).empty());
  EXPECT_TRUE(groups.arrive(12, hello(1, 4, 2, "B"), now).empty());
  EXPECT_EQ(groups.waiting(), 3u);
  const auto replies = groups.arrive(13, hello(1, 4, 0, "C"), now);
  ASSERT_EQ(replies.size(), 4u);
  for (const auto& r : replies) {
    const meeting::Answer a = decoded(r.bytes);
    EXPECT_EQ(a.error, ErrorCode::kOk);
    EXPECT_EQ(a.addresses, (std::vector<std::string>{"C", "A", "B"}));
    EXPECT_EQ(a.node_of_rank, (std::vector<uint32_t>{0, 1, 2, 2}));
  }
  EXPECT_EQ(groups.groups(), 0u);
  EXPECT_EQ(groups.waiting(), 0u);
}

TEST(MeetingGroups, DisagreeingAndDuplicateRanksAreRefusedAloneAndTheGroupWaitsOn) {
  MeetingGroups groups({4, std::chrono::seconds(10)});
  const auto now = Clock::now();
  EXPECT_TRUE(groups.arrive(1, hello(9, 2, 0, "A"), now).empty());
  auto refused = groups.arrive(2, hello(9, 3, 1, "A"), now);
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].connection, 2);
  EXPECT_EQ(decoded(refused[0].bytes).error, ErrorCode::kNranksMismatch);
  refused = groups.arrive(3, hello(9, 2, 0, "B"), now);
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(decoded(refused[0].bytes).error, ErrorCode::kAlreadyExists);
  EXPECT_EQ(groups.arrive(4, hello(9, 2, 1, "B"), now).size(), 2u);
}

TEST(MeetingGroups, ALeavingRankMayComeAgainAndAnEmptyGroupGoes) {
  MeetingGroups groups({4, std::chrono::seconds(10)});
  const auto now = Clock::now();
  EXPECT_TRUE(groups.arrive(1, hello(5, 2, 0, "A"), now).empty());
  groups.leave(1);
  EXPECT_EQ(groups.groups(), 0u);
  EXPECT_TRUE(groups.arrive(2, hello(5, 2, 0, "A"), now).empty());
  EXPECT_TRUE(groups.arrive(3, hello(6, 2, 0, "A"), now).empty());
  groups.leave(99);  // unknown: nothing
  EXPECT_EQ(groups.arrive(4, hello(5, 2, 1, "B"), now).size(), 2u);
  EXPECT_EQ(groups.groups(), 1u);
}

TEST(MeetingGroups, AGroupOutOfTimeTellsItsRanksWhoIsMissing) {
  MeetingGroups groups({4, std::chrono::seconds(10)});
  const auto now = Clock::now();
  EXPECT_TRUE(groups.arrive(1, hello(5, 3, 1, "A"), now).empty());
  EXPECT_TRUE(groups.arrive(2, hello(6, 2, 0, "A"), now + std::chrono::seconds(5)).empty());
  EXPECT_EQ(groups.deadline(1), now + std::chrono::seconds(10));
  EXPECT_TRUE(groups.expire(now + std::chrono::seconds(9)).empty());
  const auto replies = groups.expire(now + std::chrono::seconds(10));
  ASSERT_EQ(replies.size(), 1u);
  const meeting::Answer a = decoded(replies[0].bytes);
  EXPECT_EQ(a.error, ErrorCode::kTimeout);
  EXPECT_NE(a.message.find("1 of 3 ranks"), std::string::npos) << a.message;
  EXPECT_NE(a.message.find("missing rank 0, 2"), std::string::npos) << a.message;
  EXPECT_EQ(groups.groups(), 1u);
  EXPECT_FALSE(groups.deadline(1));
}

TEST(MeetingGroups, JobsBeyondTheBoundAreRefusedWithTheReason) {
  MeetingGroups groups({2, std::chrono::seconds(10)});
  const auto now = Clock::now();
  EXPECT_TRUE(groups.arrive(1, hello(1, 2, 0, "A"), now).empty());
  EXPECT_TRUE(groups.arrive(2, hello(2, 2, 0, "A"), now).empty());
  const auto refused = groups.arrive(3, hello(3, 2, 0, "A"), now);
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(decoded(refused[0].bytes).error, ErrorCode::kLimitExceeded);
  // A job already waiting still completes.
  EXPECT_EQ(groups.arrive(4, hello(1, 2, 1, "B"), now).size(), 2u);
}

}  // namespace
}  // namespace iris
