// ViewFollower: the job's views in, the agent's orders out — each at most once, and a new
// round only after the previous one's workers have stopped.
#include "launcher/coordinator/view_follower.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/unit/launcher/coordinator/recording_listener.h"

namespace ftrun::testing {
namespace {

using rendezvous::NodeView;
using rendezvous::Phase;

class ViewFollowerTest : public ::testing::Test {
 protected:
  static NodeView View(Phase phase, uint64_t round, bool member = true) {
    NodeView v;
    v.phase = phase;
    v.round = round;
    v.member = member;
    v.assignment.round = round;
    return v;
  }
  std::vector<std::string> Take() { return std::exchange(rec.calls, {}); }

  Recorder rec;
  std::vector<uint64_t> stopped;
  launcher::ViewFollower follower{&rec, [this](uint64_t r) { stopped.push_back(r); }};
};

TEST_F(ViewFollowerTest, ARunningRoundStartsOnceEvenIfSeenAgain) {
  follower.Apply(View(Phase::kForming, 1));
  follower.Apply(View(Phase::kRunning, 1));
  follower.Apply(View(Phase::kRunning, 1));
  EXPECT_EQ(Take(), std::vector<std::string>{"start 1"});
  EXPECT_EQ(follower.started_round(), 1u);
}

TEST_F(ViewFollowerTest, StoppingOurRoundAsksOnceAndTheNextRoundWaitsForTheStop) {
  follower.Apply(View(Phase::kRunning, 1));
  Take();
  auto stopping = View(Phase::kStopping, 1);
  stopping.reason = "rank 3 failed";
  follower.Apply(stopping);
  follower.Apply(stopping);
  EXPECT_EQ(Take(), (std::vector<std::string>{"stopping 1", "restart rank 3 failed"}));
  follower.Apply(View(Phase::kRunning, 2));  // the job moved on; ours still stop
  EXPECT_TRUE(Take().empty());
  follower.WorkersStopped();
  EXPECT_EQ(stopped, std::vector<uint64_t>{1});
  EXPECT_EQ(Take(), std::vector<std::string>{"start 2"}) << "the last view applies now";
}

TEST_F(ViewFollowerTest, LeavingTheRoundStopsOurWorkers) {
  follower.Apply(View(Phase::kRunning, 1));
  Take();
  follower.Apply(View(Phase::kRunning, 2, /*member=*/false));
  EXPECT_EQ(Take(), std::vector<std::string>{"restart this node left the round"});
}

// A spare: the round runs without this node. Announced once per round, and never while
// this node's own workers still run.
TEST(ViewFollowerSpare, ARoundRunningWithoutThisNodeIsAnnouncedOncePerRound) {
  struct SpareRecorder : Recorder {
    void OnWaitingAsSpare(uint64_t round) override {
      calls.push_back("spare " + std::to_string(round));
    }
  } rec;
  launcher::ViewFollower follower{&rec, [](uint64_t) {}};
  auto view = [](Phase phase, uint64_t round, bool member) {
    NodeView v;
    v.phase = phase;
    v.round = round;
    v.member = member;
    v.spare = !member;
    v.assignment.round = round;
    return v;
  };
  follower.Apply(view(Phase::kForming, 0, false));
  follower.Apply(view(Phase::kRunning, 0, false));
  follower.Apply(view(Phase::kRunning, 0, false));
  follower.Apply(view(Phase::kRunning, 1, false));
  follower.Apply(view(Phase::kRunning, 2, true));  // promoted
  EXPECT_EQ(rec.calls, (std::vector<std::string>{"spare 0", "spare 1", "start 2"}));
  rec.calls.clear();
  follower.Apply(view(Phase::kRunning, 3, false));  // left out again: ours stop first
  EXPECT_EQ(rec.calls, std::vector<std::string>{"restart this node left the round"});
  rec.calls.clear();
  follower.WorkersStopped();
  EXPECT_EQ(rec.calls, std::vector<std::string>{"spare 3"});
}

// Outside the round below MAX (waiting for a whole --node-unit): not announced as a spare;
// becoming one later in the same round is announced then.
TEST(ViewFollowerSpare, WaitingForANodeUnitIsNotASpare) {
  struct Rec : Recorder {
    void OnWaitingAsSpare(uint64_t round) override {
      calls.push_back("spare " + std::to_string(round));
    }
    void OnWaitingForNodeUnit(uint64_t round) override {
      calls.push_back("waiting " + std::to_string(round));
    }
  } rec;
  launcher::ViewFollower follower{&rec, [](uint64_t) {}};
  NodeView v;
  v.phase = Phase::kRunning;
  v.round = 4;
  follower.Apply(v);
  follower.Apply(v);
  v.spare = true;
  follower.Apply(v);
  EXPECT_EQ(rec.calls, (std::vector<std::string>{"waiting 4", "spare 4"}));
}

TEST_F(ViewFollowerTest, AStopWithNothingOfOursRunningIsReportedAtOnce) {
  follower.Apply(View(Phase::kStopping, 4));
  EXPECT_EQ(stopped, std::vector<uint64_t>{4});
  follower.Apply(View(Phase::kStopping, 4));
  EXPECT_EQ(stopped, std::vector<uint64_t>{4});
}

TEST_F(ViewFollowerTest, EachSaveOrderStepIsPassedOnOnce) {
  follower.Apply(View(Phase::kRunning, 1));
  auto saving = View(Phase::kSaving, 1);
  saving.save = rendezvous::SaveOrder{};
  saving.save->id = 7;
  saving.save->collecting = true;
  follower.Apply(saving);
  follower.Apply(saving);
  saving.save->collecting = false;
  saving.save->step = 12;
  follower.Apply(saving);
  EXPECT_EQ(Take(), (std::vector<std::string>{"start 1", "stopping 1", "save 1/7", "save 1/7"}));
}

TEST_F(ViewFollowerTest, NetworkCheckOrdersAndResultsArePassedOnOnce) {
  auto checking = View(Phase::kChecking, 1);
  checking.check = rendezvous::CheckOrder{};
  checking.check->id = 3;
  follower.Apply(checking);
  follower.Apply(checking);
  checking.check_id = 9;
  follower.Apply(checking);
  follower.Apply(checking);
  EXPECT_EQ(Take(), (std::vector<std::string>{"check 1/3", "checked 9"}));
}

TEST_F(ViewFollowerTest, EachNewStackDumpOrderIsPassedOnOnceToMembers) {
  auto running = View(Phase::kRunning, 1);
  running.stacks_id = 4;  // an order from before this node joined: not ours
  follower.Apply(running);
  EXPECT_EQ(Take(), std::vector<std::string>{"start 1"});
  running.stacks_id = 5;
  follower.Apply(running);
  follower.Apply(running);
  auto outside = View(Phase::kRunning, 1, false);
  outside.stacks_id = 6;  // not a member: nothing of ours to dump
  follower.Apply(outside);
  EXPECT_EQ(Take(), (std::vector<std::string>{"stacks 1/5", "restart this node left the round"}));
}

TEST_F(ViewFollowerTest, TheJobsEndIsFinalAndNothingFollowsIt) {
  follower.Apply(View(Phase::kRunning, 1));
  auto failed = View(Phase::kFailed, 1);
  failed.reason = "restarts exhausted (3/3)";
  follower.Apply(failed);
  follower.Apply(View(Phase::kRunning, 2));
  EXPECT_TRUE(follower.finished());
  EXPECT_EQ(Take(), (std::vector<std::string>{"start 1", "failed restarts exhausted (3/3)"}));
}

TEST_F(ViewFollowerTest, AnExcludedNodeHearsOnlyThat) {
  auto v = View(Phase::kRunning, 1);
  v.excluded = "too slow";
  follower.Apply(v);
  follower.Apply(View(Phase::kRunning, 1));
  EXPECT_EQ(Take(), std::vector<std::string>{"excluded too slow"});
  EXPECT_TRUE(follower.finished());
}

}  // namespace
}  // namespace ftrun::testing
