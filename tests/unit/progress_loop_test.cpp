// The progress loop's sleep (daemon/progress_loop.hpp): idle past --spin-us it sleeps in epoll
// and the heartbeat wakes it; a wake-up for the heartbeat alone polls once and sleeps again, so
// that an idle irisd does not spin after every beat.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "daemon/progress_loop.hpp"

namespace iris::daemon {
namespace {

// Never has work; counts the polls, the sleeps, and the polls before the first sleep.
class IdlePoller final : public Poller {
 public:
  bool poll() override {
    polls.fetch_add(1);
    return false;
  }
  bool try_enter_sleep() override {
    if (sleeps.fetch_add(1) == 0) polls_before_first_sleep.store(polls.load());
    return true;
  }
  std::atomic<uint64_t> polls{0}, sleeps{0}, polls_before_first_sleep{0};
};

TEST(ProgressLoop, AHeartbeatWakeUpPollsOnceAndSleepsAgain) {
  using namespace std::chrono_literals;
  // A spin long enough that spinning after a beat would show as hundreds of polls.
  ProgressLoop loop(20ms);
  IdlePoller idle;
  std::atomic<int> beats{0};
  loop.set_heartbeat(5ms, [&] { beats.fetch_add(1); });
  loop.add_poller(idle);
  loop.start();
  for (int k = 0; k < 10000 && idle.sleeps.load() < 8; ++k) std::this_thread::sleep_for(1ms);
  loop.stop();
  ASSERT_GE(idle.sleeps.load(), 8u) << "the loop never slept 8 times within 10 s";
  EXPECT_GE(beats.load(), 7);
  // After the first sleep, each wake-up (all of them the heartbeat's) polled once; stop()'s own
  // wake-up may add one.
  const uint64_t polls_after = idle.polls.load() - idle.polls_before_first_sleep.load();
  EXPECT_LE(polls_after, idle.sleeps.load()) << "the loop spun after heartbeat wake-ups";
}

}  // namespace
}  // namespace iris::daemon
