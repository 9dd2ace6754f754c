// StandbyPool: the states of --warm-restart's standbys, driven with scripted events and time.
#include "launcher/standby/standby_pool.h"

#include <gtest/gtest.h>

namespace ftrun::launcher {
namespace {

using namespace std::chrono_literals;
using Kind = StandbyPool::Action::Kind;

class StandbyPoolTest : public ::testing::Test {
 protected:
  StandbyPoolOptions Options() {
    StandbyPoolOptions o;
    o.refill_delay = 100ms;
    o.ready_timeout = 10s;
    o.backoff_initial = 1s;
    o.backoff_max = 4s;
    o.max_startup_failures = 3;
    return o;
  }
  // Polls and returns the ids of the spawns asked for.
  std::vector<uint64_t> Spawns() {
    std::vector<uint64_t> ids;
    for (const auto& a : pool_.Poll(now_)) {
      if (a.kind == Kind::kSpawn) ids.push_back(a.id);
    }
    return ids;
  }
  std::vector<StandbyPool::Action> Kills() {
    std::vector<StandbyPool::Action> out;
    for (const auto& a : pool_.Poll(now_)) {
      if (a.kind == Kind::kKill) out.push_back(a);
    }
    return out;
  }
  // Two workers with key "a", one with "b", all standbys ready.
  std::vector<uint64_t> ReadyPool() {
    pool_.Want({{"a", 2}, {"b", 1}}, now_);
    now_ += 100ms;
    auto ids = Spawns();
    for (auto id : ids) pool_.Ready(id);
    return ids;
  }

  StandbyPool pool_{Options()};
  StandbyPool::TimePoint now_{};
};

TEST_F(StandbyPoolTest, RefillsAfterTheDelayOnePerWorker) {
  EXPECT_EQ(pool_.Take("a").reason, "no_standby");
  pool_.Want({{"a", 2}, {"b", 1}}, now_);
  EXPECT_TRUE(Spawns().empty());
  ASSERT_TRUE(pool_.NextDeadline());
  EXPECT_EQ(*pool_.NextDeadline(), now_ + 100ms);
  now_ += 100ms;
  auto ids = Spawns();
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(pool_.Count(StandbyState::kStarting), 3u);
  EXPECT_TRUE(Spawns().empty()) << "asked twice";
  EXPECT_EQ(pool_.Take("a").reason, "standby_starting");
  pool_.Ready(ids[0]);
  EXPECT_EQ(*pool_.state(ids[0]), StandbyState::kReady);
}

TEST_F(StandbyPoolTest, TakeHandsOverAReadyStandbyOfTheSameKeyOnly) {
  ReadyPool();
  EXPECT_EQ(pool_.Take("c").reason, "no_standby");
  auto a1 = pool_.Take("a");
  auto a2 = pool_.Take("a");
  ASSERT_NE(a1.id, 0u);
  ASSERT_NE(a2.id, 0u);
  EXPECT_NE(a1.id, a2.id);
  EXPECT_EQ(*pool_.state(a1.id), StandbyState::kHandingOver);
  EXPECT_EQ(pool_.Take("a").id, 0u) << "only two were made for a";
  pool_.HandedOver(a1.id);
  pool_.HandedOver(a2.id);
  EXPECT_FALSE(pool_.state(a1.id));
  // The next start of workers wants the same: two new standbys for a, none more for b.
  pool_.Want({{"a", 2}, {"b", 1}}, now_);
  now_ += 100ms;
  EXPECT_EQ(Spawns().size(), 2u);
}

TEST_F(StandbyPoolTest, AStandbyThatDiesWhileReadyIsReplacedAfterABackOff) {
  auto ids = ReadyPool();
  pool_.Exited(ids[0], "\"signal 9 (SIGKILL)\"", now_);
  EXPECT_FALSE(pool_.state(ids[0]));
  EXPECT_TRUE(Spawns().empty()) << "back-off first";
  auto pick = pool_.Take("a");  // the other "a" standby is still there
  EXPECT_NE(pick.id, 0u);
  pool_.HandedOver(pick.id);
  EXPECT_EQ(pool_.Take("a").reason, "standby_died how=\"signal 9 (SIGKILL)\" state=ready");
  now_ += 1s;
  EXPECT_EQ(Spawns().size(), 2u);  // for the dead one and the one handed over
  EXPECT_FALSE(pool_.off());
}

TEST_F(StandbyPoolTest, BackOffDoublesUpToTheMaximumAndAHandOverResetsIt) {
  auto ids = ReadyPool();
  uint64_t last = ids[0];
  // Deaths in a row wait 1, 2, 4, then 4 s (the maximum) before the replacement.
  for (auto wait : {1s, 2s, 4s, 4s}) {
    pool_.Exited(last, "x", now_);
    now_ += wait - 1ms;
    EXPECT_TRUE(Spawns().empty()) << wait.count();
    now_ += 1ms;
    auto again = Spawns();
    ASSERT_EQ(again.size(), 1u) << wait.count();
    pool_.Ready(again[0]);
    last = again[0];
  }
  auto pick = pool_.Take("b");
  ASSERT_NE(pick.id, 0u);
  pool_.HandedOver(pick.id);  // a standby served: back to 1 s
  pool_.Exited(last, "x", now_);
  now_ += 1s;
  EXPECT_EQ(Spawns().size(), 2u);  // the dead a and the handed-over b
}

TEST_F(StandbyPoolTest, APreloadThatFailsTurnsThePoolOffAndKillsTheRest) {
  pool_.Want({{"a", 2}}, now_);
  now_ += 100ms;
  auto ids = Spawns();
  ASSERT_EQ(ids.size(), 2u);
  pool_.Broken(ids[0], "preload_failed", "module=nope error=ModuleNotFoundError", now_);
  EXPECT_TRUE(pool_.off());
  EXPECT_EQ(pool_.off_reason(), "cause=preload_failed module=nope error=ModuleNotFoundError");
  auto kills = Kills();
  ASSERT_EQ(kills.size(), 1u);
  EXPECT_EQ(kills[0].id, ids[1]);
  EXPECT_EQ(pool_.Take("a").reason,
            "warm_restart_off cause=preload_failed module=nope error=ModuleNotFoundError");
  pool_.Want({{"a", 2}}, now_);
  now_ += 1h;
  EXPECT_TRUE(Spawns().empty());
  EXPECT_FALSE(pool_.NextDeadline());
}

TEST_F(StandbyPoolTest, StandbysThatNeverGetReadyAreKilledAsHungAndThenThePoolGivesUp) {
  pool_.Want({{"a", 1}}, now_);
  for (int round = 0; round < 3; ++round) {
    now_ += 5s;  // past any back-off
    auto ids = Spawns();
    ASSERT_EQ(ids.size(), 1u) << round;
    ASSERT_TRUE(pool_.NextDeadline());
    EXPECT_EQ(*pool_.NextDeadline(), now_ + 10s);
    now_ += 10s;
    auto kills = Kills();
    ASSERT_EQ(kills.size(), 1u) << round;
    EXPECT_EQ(kills[0].why, "hung");
    pool_.Exited(ids[0], "\"signal 9 (SIGKILL)\"", now_);  // our kill: not counted twice
    if (round < 2) {
      EXPECT_FALSE(pool_.off()) << round;
      EXPECT_EQ(pool_.Take("a").reason, "standby_hung not_ready_after_s=10");
    }
  }
  EXPECT_TRUE(pool_.off());
  EXPECT_NE(pool_.off_reason().find("cause=standby_startup_failures count=3"), std::string::npos)
      << pool_.off_reason();
}

TEST_F(StandbyPoolTest, AFailedHandOverMarksTheStandbyDeadAndCountsTowardTheBackOff) {
  ReadyPool();
  auto pick = pool_.Take("b");
  pool_.HandOverFailed(pick.id, "handover_timeout phase=ack", now_);
  EXPECT_EQ(*pool_.state(pick.id), StandbyState::kDead);
  EXPECT_EQ(pool_.Take("b").reason, "handover_failed handover_timeout phase=ack");
  pool_.Exited(pick.id, "\"signal 9 (SIGKILL)\"", now_);
  EXPECT_FALSE(pool_.state(pick.id));
  EXPECT_TRUE(Spawns().empty());
  now_ += 1s;
  EXPECT_EQ(Spawns().size(), 1u);
}

TEST_F(StandbyPoolTest, SurplusStandbysAreKilledWhenTheWorkersChange) {
  ReadyPool();
  pool_.Want({{"a", 1}, {"c", 1}}, now_);  // b gone, one a fewer, c new
  auto actions = pool_.Poll(now_);
  int kills = 0;
  for (const auto& a : actions) kills += a.kind == Kind::kKill ? 1 : 0;
  EXPECT_EQ(kills, 2);
  EXPECT_EQ(pool_.Count(StandbyState::kReady), 1u);
  now_ += 100ms;
  EXPECT_EQ(Spawns().size(), 1u);  // for c
}

TEST_F(StandbyPoolTest, ShutdownKillsEveryLiveStandbyAndStopsRefilling) {
  auto ids = ReadyPool();
  auto kill = pool_.Shutdown();
  EXPECT_EQ(kill.size(), ids.size());
  EXPECT_TRUE(pool_.off());
  for (auto id : ids) pool_.Exited(id, "x", now_);
  EXPECT_EQ(pool_.Count(StandbyState::kDead), 0u);
  now_ += 1h;
  EXPECT_TRUE(pool_.Poll(now_).empty());
}

TEST_F(StandbyPoolTest, SpawnFailuresBackOffAndCountAsStartupFailures) {
  pool_.Want({{"a", 1}}, now_);
  for (int i = 0; i < 3; ++i) {
    now_ += 5s;
    auto ids = Spawns();
    ASSERT_EQ(ids.size(), 1u);
    pool_.SpawnFailed(ids[0], "\"no such file\"", now_);
  }
  EXPECT_TRUE(pool_.off());
}

}  // namespace
}  // namespace ftrun::launcher
