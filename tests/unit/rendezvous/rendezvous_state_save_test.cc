// RendezvousState's fault-time save between a running round and its stop (fake clock).
#include <gtest/gtest.h>

#include <string>

#include "rendezvous/rendezvous_state.h"
#include "tests/unit/rendezvous/rendezvous_state_fixture.h"

namespace ftrun::rendezvous {
namespace {

using std::chrono::seconds;

class SaveTest : public RendezvousStateTest {
 protected:
  void SetUp() override {
    JobSpec s = Spec(2, 2, /*max_restarts=*/3);
    s.fault_save = true;
    s.save_timeout = seconds(10);
    s.collect_timeout = seconds(2);
    Make(s);
    Join("a");  // ranks 0, 1
    Join("b");  // ranks 2, 3
    ASSERT_EQ(phase(), Phase::kRunning);
  }
  static RankProgress P(int rank, int64_t step, bool healthy = true, bool updating = false) {
    return RankProgress{rank, "", step, updating, healthy, true};
  }
};

TEST_F(SaveTest, FailureCollectsProgressThenOrdersTheSaverThenStops) {
  state_->ReportFailed("b", 0, {Failure(3)}, now_);
  ASSERT_EQ(phase(), Phase::kSaving);
  auto v = View("a");
  ASSERT_TRUE(v.save);
  EXPECT_TRUE(v.save->collecting);
  EXPECT_EQ(v.restart_count, 1);
  const uint64_t id = v.save->id;
  state_->ReportProgress("b", 0, id, {P(2, 41), P(3, 42, false, true)}, now_);
  EXPECT_TRUE(View("a").save->collecting);  // still waiting for a
  state_->ReportProgress("a", 0, id, {P(0, 41), P(1, 41)}, now_);
  v = View("b");
  ASSERT_TRUE(v.save);
  EXPECT_FALSE(v.save->collecting);
  EXPECT_EQ(v.save->step, 41);
  ASSERT_EQ(v.save->savers.size(), 1u);
  EXPECT_EQ(v.save->savers[0].rank, 0);
  // Another node cannot answer for rank 0.
  state_->ReportSaved("b", 0, id, 0, false, true, "", now_);
  EXPECT_EQ(phase(), Phase::kSaving);
  state_->ReportSaved("a", 0, id, 0, false, true, "", now_);
  ASSERT_EQ(phase(), Phase::kStopping);
  EXPECT_NE(View("a").reason.find("restart 1/3; saved step 41 (saver 0)"), std::string::npos)
      << View("a").reason;
  EXPECT_EQ(View("a").failures.size(), 1u);
  StopAll(0, {"a", "b"});
  EXPECT_EQ(phase(), Phase::kRunning);
}

TEST_F(SaveTest, ANodeLostDuringTheSaveOfItsPeersFailureNeitherSpendsNorEndsTheJob) {
  // The budget is spent: a's collective failing would end the job, but b was lost meanwhile.
  for (int i = 0; i < 3; ++i) {
    state_->ReportFailed("b", state_->round(), {Failure(3)}, now_);
    const uint64_t id = View("a").save->id;
    state_->ReportProgress("a", state_->round(), id, {P(0, -1), P(1, -1)}, now_);
    state_->ReportProgress("b", state_->round(), id, {P(2, -1), P(3, -1)}, now_);
    StopAll(state_->round(), {"a", "b"});
    ASSERT_EQ(phase(), Phase::kRunning) << View("a").reason;
  }
  ASSERT_EQ(View("a").restart_count, 3);
  state_->ReportFailed("a", state_->round(), {Failure(0)}, now_);
  ASSERT_EQ(phase(), Phase::kSaving);
  alive_ = {"a"};
  Advance(seconds(16));  // b is lost during the save
  const uint64_t id = View("a").save->id;
  state_->ReportProgress("a", state_->round(), id, {P(0, 9), P(1, 9)}, now_);
  Advance(seconds(11));
  EXPECT_NE(phase(), Phase::kFailed) << View("a").reason;
  EXPECT_EQ(View("a").restart_count, 3);
  EXPECT_NE(View("a").reason.find("no restart spent"), std::string::npos) << View("a").reason;
}

TEST_F(SaveTest, NoHandlerMeansNoSaveAndTheRestartProceeds) {
  state_->ReportFailed("b", 0, {Failure(3)}, now_);
  const uint64_t id = View("a").save->id;
  state_->ReportProgress("a", 0, id, {}, now_);
  state_->ReportProgress("b", 0, id, {}, now_);
  ASSERT_EQ(phase(), Phase::kStopping);
  EXPECT_NE(View("a").reason.find("no fault-time save: no rank registered a save handler"),
            std::string::npos)
      << View("a").reason;
}

TEST_F(SaveTest, SilentNodeDoesNotBlockCollection) {
  state_->ReportFailed("b", 0, {Failure(3)}, now_);
  const uint64_t id = View("a").save->id;
  state_->ReportProgress("a", 0, id, {P(0, 7), P(1, 7)}, now_);
  alive_ = {"a", "b"};
  Advance(seconds(3));  // past the collect timeout: plan with what arrived
  ASSERT_EQ(phase(), Phase::kSaving);
  EXPECT_EQ(View("a").save->step, 7);
}

TEST_F(SaveTest, SaverFailureOrTimeoutAbandonsTheSaveButNotTheRestart) {
  state_->ReportFailed("b", 0, {Failure(3)}, now_);
  const uint64_t id = View("a").save->id;
  state_->ReportProgress("a", 0, id, {P(0, 5), P(1, 5)}, now_);
  state_->ReportProgress("b", 0, id, {P(2, 5)}, now_);
  state_->ReportSaved("a", 0, id, 0, false, false, "disk full", now_);
  ASSERT_EQ(phase(), Phase::kStopping);
  EXPECT_NE(View("a").reason.find("save of step 5 failed on rank 0: disk full"), std::string::npos);
  StopAll(0, {"a", "b"});
  // Second fault: the saver never answers.
  state_->ReportFailed("a", 1, {Failure(1)}, now_);
  const uint64_t id2 = View("a").save->id;
  EXPECT_GT(id2, id);
  state_->ReportProgress("a", 1, id2, {P(0, 9)}, now_);
  state_->ReportProgress("b", 1, id2, {P(2, 9), P(3, 9)}, now_);
  alive_ = {"a", "b"};
  Advance(seconds(11));
  ASSERT_EQ(phase(), Phase::kStopping);
  EXPECT_NE(View("a").reason.find("save of step 9 timed out"), std::string::npos)
      << View("a").reason;
  EXPECT_EQ(View("a").restart_count, 2);
}

TEST_F(SaveTest, SeveralGroupsSaveThenOneFinalizes) {
  state_->ReportFailed("b", 0, {Failure(3)}, now_);
  const uint64_t id = View("a").save->id;
  auto g = [](int rank, const std::string& group, int64_t step, bool healthy = true) {
    return RankProgress{rank, group, step, false, healthy, true};
  };
  state_->ReportProgress("a", 0, id, {g(0, "x", 4), g(1, "y", 4)}, now_);
  state_->ReportProgress("b", 0, id, {g(2, "x", 4), g(3, "y", 4, false)}, now_);
  auto v = View("a");
  ASSERT_EQ(v.save->savers.size(), 2u);
  EXPECT_EQ(v.save->finalizer, 0);
  state_->ReportSaved("a", 0, id, 1, false, true, "", now_);
  state_->ReportSaved("a", 0, id, 0, false, true, "", now_);
  v = View("b");
  ASSERT_EQ(phase(), Phase::kSaving);
  EXPECT_TRUE(v.save->finalize);
  state_->ReportSaved("a", 0, id, 0, true, true, "", now_);
  ASSERT_EQ(phase(), Phase::kStopping);
  EXPECT_NE(View("a").reason.find("saved step 4 (savers 0,1)"), std::string::npos);
}

TEST_F(SaveTest, LostSaverNodeAbandonsTheSave) {
  state_->ReportFailed("a", 0, {Failure(0)}, now_);
  const uint64_t id = View("a").save->id;
  state_->ReportProgress("a", 0, id, {P(0, 3, false), P(1, 3, false)}, now_);
  state_->ReportProgress("b", 0, id, {P(2, 3), P(3, 3)}, now_);
  ASSERT_EQ(View("a").save->savers[0].rank, 2);
  state_->Leave("b", now_);
  ASSERT_EQ(phase(), Phase::kStopping);
  EXPECT_NE(View("a").reason.find("saver rank 2 failed"), std::string::npos) << View("a").reason;
}

TEST_F(SaveTest, FinalFailureSavesThenFails) {
  JobSpec s = Spec(1, 1, 0);
  s.fault_save = true;
  Make(s);
  Join("a");
  state_->ReportFailed("a", 0, {Failure(1)}, now_);
  ASSERT_EQ(phase(), Phase::kSaving);
  const uint64_t id = View("a").save->id;
  state_->ReportProgress("a", 0, id, {P(0, 12), P(1, 12, false)}, now_);
  state_->ReportSaved("a", 0, id, 0, false, true, "", now_);
  ASSERT_EQ(phase(), Phase::kFailed);
  EXPECT_NE(View("a").reason.find("--max-restarts is 0; saved step 12"), std::string::npos);
  EXPECT_EQ(View("a").failures.size(), 1u);
}

}  // namespace
}  // namespace ftrun::rendezvous
