// The per-user attach rate: a burst as large as the rate, then one attach per 1/rate seconds,
// each user on its own bucket, and users whose bucket filled again forgotten.
#include "daemon/front/attach_rate.hpp"

#include <gtest/gtest.h>

namespace iris::daemon {
namespace {

using namespace std::chrono_literals;

TEST(AttachRate, ABurstOfTheRateThenOnePerInterval) {
  AttachRate rate(10);
  const auto t0 = AttachRate::Clock::time_point{} + 1h;
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(rate.take(1000, t0)) << i;
  EXPECT_FALSE(rate.take(1000, t0));
  EXPECT_FALSE(rate.take(1000, t0 + 50ms));  // half a token back
  EXPECT_TRUE(rate.take(1000, t0 + 100ms));
  EXPECT_FALSE(rate.take(1000, t0 + 100ms));
  EXPECT_TRUE(rate.take(1001, t0)) << "another user has its own bucket";
  // A long pause refills to the burst, not past it.
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(rate.take(1000, t0 + 1h)) << i;
  EXPECT_FALSE(rate.take(1000, t0 + 1h));
}

TEST(AttachRate, ForgetsUsersWhoseBucketFilledAgain) {
  AttachRate rate(1);
  const auto t0 = AttachRate::Clock::time_point{} + 1h;
  for (uid_t uid = 0; uid < 5000; ++uid) EXPECT_TRUE(rate.take(uid, t0));
  EXPECT_LE(rate.tracked(), 5000u);
  EXPECT_TRUE(rate.take(90000, t0 + 10s));  // every earlier bucket is full again: dropped
  EXPECT_LE(rate.tracked(), 2u);
  EXPECT_FALSE(rate.take(90000, t0 + 10s)) << "the newest user's use is remembered";
}

}  // namespace
}  // namespace iris::daemon
