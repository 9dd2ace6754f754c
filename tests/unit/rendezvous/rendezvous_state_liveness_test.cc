// RendezvousState on a fake clock: when a node is lost (silence, a dropped transport, an
// answered watch not followed by a call) and what its loss does to the round.
#include <gtest/gtest.h>

#include "rendezvous/rendezvous_state.h"
#include "tests/unit/rendezvous/rendezvous_state_fixture.h"

namespace ftrun::rendezvous {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST_F(RendezvousStateTest, ALostNodesPlaceGoesToTheSpareSoOtherRanksStay) {
  Make(Spec(1, 3));
  Join("a");
  Join("b");
  Join("c");
  Join("s");  // a spare
  ASSERT_EQ(phase(), Phase::kRunning);
  alive_ = {"a", "c", "s"};
  Advance(seconds(16));  // b (group rank 1) is lost
  StopAll(0, {"a", "c"});
  ASSERT_EQ(phase(), Phase::kRunning);
  EXPECT_EQ(View("a").assignment.group_rank, 0);
  EXPECT_EQ(View("s").assignment.group_rank, 1);
  EXPECT_EQ(View("c").assignment.group_rank, 2);
  alive_ = {"a", "s"};
  Advance(seconds(16));  // c is lost and no spare is left: its place closes up
  StopAll(1, {"a", "s"});
  ASSERT_EQ(phase(), Phase::kRunning);
  EXPECT_EQ(View("a").assignment.group_rank, 0);
  EXPECT_EQ(View("s").assignment.group_rank, 1);
}

TEST_F(RendezvousStateTest, ANodeLostWhileTheSurvivorsFailSpendsNoRestart) {
  Make(Spec(1, 2, /*max_restarts=*/3));
  Join("a");
  Join("b");
  Join("s");  // a spare
  ASSERT_EQ(phase(), Phase::kRunning);
  // b died: a's collective fails first, and b is declared lost only afterwards.
  state_->ReportFailed("a", 0, {Failure(0)}, now_);
  ASSERT_EQ(phase(), Phase::kStopping);
  EXPECT_EQ(View("a").restart_count, 1);
  alive_ = {"a", "s"};
  Advance(seconds(16));
  EXPECT_EQ(View("a").restart_count, 0) << View("a").reason;
  EXPECT_NE(View("a").reason.find("node b.host lost"), std::string::npos) << View("a").reason;
  EXPECT_NE(View("a").reason.find("no restart spent"), std::string::npos) << View("a").reason;
  StopAll(0, {"a"});
  ASSERT_EQ(phase(), Phase::kRunning);
  EXPECT_EQ(View("s").assignment.group_rank, 1);
  EXPECT_EQ(View("s").assignment.restart_count, 0);
  // A failure with every node alive still spends one.
  state_->ReportFailed("s", 1, {Failure(2)}, now_);
  alive_ = {"a", "s"};
  Advance(seconds(1));
  StopAll(1, {"a", "s"});
  EXPECT_EQ(View("a").assignment.restart_count, 1);
}

// A member whose transport is gone while the round stops for worker failures is lost after
// 0.2 s, not the whole disconnect grace: the survivors' failures are the evidence.
TEST_F(RendezvousStateTest, ADisconnectedMemberIsLostAtOnceWhenItsPeersFail) {
  JobSpec spec = Spec(1, 2, /*max_restarts=*/3);
  spec.disconnect_grace = seconds(5);
  Make(spec);
  Join("a");
  Join("b");
  Join("s");  // a spare
  ASSERT_EQ(phase(), Phase::kRunning);
  alive_ = {"a", "s"};
  state_->Disconnected("b", now_);
  Advance(std::chrono::milliseconds(300));
  EXPECT_EQ(phase(), Phase::kRunning) << "without a failure the grace holds";
  state_->ReportFailed("a", 0, {Failure(0)}, now_);  // b was gone 0.3 s already: lost now
  EXPECT_EQ(View("a").restart_count, 0) << View("a").reason;
  EXPECT_NE(View("a").reason.find("no restart spent"), std::string::npos) << View("a").reason;
  StopAll(0, {"a"});
  ASSERT_EQ(phase(), Phase::kRunning);
  EXPECT_EQ(View("s").assignment.group_rank, 1);
}

TEST_F(RendezvousStateTest, AFailureThenADisconnectLosesTheMemberAfterTheShortGrace) {
  JobSpec spec = Spec(1, 2, /*max_restarts=*/3);
  spec.disconnect_grace = seconds(5);
  Make(spec);
  Join("a");
  Join("b");
  ASSERT_EQ(phase(), Phase::kRunning);
  alive_ = {"a"};
  state_->ReportFailed("a", 0, {Failure(0)}, now_);
  state_->Disconnected("b", now_);
  Advance(std::chrono::milliseconds(100));
  EXPECT_EQ(View("a").restart_count, 1) << "b may still call back";
  Advance(std::chrono::milliseconds(250));
  EXPECT_EQ(View("a").restart_count, 0) << View("a").reason;
  // A node that calls again within the short grace stays.
  Make(spec);
  Join("a");
  Join("b");
  alive_ = {"a"};
  state_->ReportFailed("a", 0, {Failure(0)}, now_);
  state_->Disconnected("b", now_);
  Advance(std::chrono::milliseconds(100));
  state_->Seen("b", now_);
  Advance(std::chrono::milliseconds(300));
  EXPECT_EQ(View("a").restart_count, 1);
}

TEST_F(RendezvousStateTest, NodeLossBelowMinWaitsForANodeThenFails) {
  Make(Spec(2, 2, 3));
  Join("a");
  Join("b");
  ASSERT_EQ(phase(), Phase::kRunning);
  state_->Disconnected("b", now_);
  alive_ = {"a"};
  Advance(milliseconds(500));
  EXPECT_EQ(phase(), Phase::kRunning);  // within the disconnect grace
  Advance(milliseconds(700));
  ASSERT_EQ(phase(), Phase::kStopping);
  StopAll(0, {"a"});
  EXPECT_EQ(phase(), Phase::kForming);
  Join("b2");
  alive_ = {"a", "b2"};
  ASSERT_EQ(phase(), Phase::kRunning);  // the replacement completes the round
  EXPECT_EQ(View("a").restart_count, 0);
  // Now lose b2 for good.
  alive_ = {"a"};
  Advance(seconds(16));
  ASSERT_EQ(phase(), Phase::kStopping);
  StopAll(1, {"a"});
  ASSERT_EQ(phase(), Phase::kForming);
  for (int i = 0; i < 601 && phase() == Phase::kForming; ++i) Advance(seconds(1));
  EXPECT_EQ(phase(), Phase::kFailed);
  EXPECT_NE(View("a").reason.find("did not complete"), std::string::npos);
}

TEST_F(RendezvousStateTest, SeenKeepsANodeAliveAndDisconnectIsForgivenByACall) {
  Make(Spec(1, 1));
  Join("a");
  state_->Disconnected("a", now_);
  Advance(milliseconds(500));
  state_->Seen("a", now_);  // it called again: not lost
  Advance(seconds(2));
  state_->Seen("a", now_);
  EXPECT_EQ(phase(), Phase::kRunning);
  EXPECT_TRUE(state_->IsNode("a"));
}

// A node that died just after its watch was answered has no call for a transport to cut: it
// counts as disconnected when it has not called within kRewatchGrace, long before the
// liveness timeout's silence.
TEST_F(RendezvousStateTest, AnAnsweredNodeThatDoesNotCallAgainIsLostAfterTheGrace) {
  Make(Spec(1, 2, /*max_restarts=*/3));
  Join("a");
  Join("b");
  ASSERT_EQ(phase(), Phase::kRunning);
  alive_ = {"a"};
  state_->Answered("b", now_);
  Advance(milliseconds(4800));
  EXPECT_EQ(phase(), Phase::kRunning) << "b may still call again";
  Advance(milliseconds(400));
  ASSERT_EQ(phase(), Phase::kStopping);
  EXPECT_NE(View("a").reason.find("b.host lost (disconnected: no call within 5s of its last "
                                  "answer)"),
            std::string::npos)
      << View("a").reason;
  EXPECT_EQ(View("a").restart_count, 0);
}

TEST_F(RendezvousStateTest, AnAnsweredNodeThatCallsAgainStays) {
  Make(Spec(1, 2));
  Join("a");
  Join("b");
  alive_ = {"a"};
  for (int i = 0; i < 5; ++i) {  // answered, and calling again 4.5 s later each time
    state_->Answered("b", now_);
    Advance(milliseconds(4500));
    state_->Seen("b", now_);
  }
  EXPECT_EQ(phase(), Phase::kRunning);
  EXPECT_TRUE(state_->IsNode("b"));
}

// In a round stopping for worker failures the failures are the evidence (as for a dropped
// transport): an answered member that does not call again within a second is lost.
TEST_F(RendezvousStateTest, AnAnsweredMemberOfAFailingRoundHasOneSecond) {
  Make(Spec(1, 2, /*max_restarts=*/3));
  Join("a");
  Join("b");
  ASSERT_EQ(phase(), Phase::kRunning);
  alive_ = {"a"};
  state_->ReportFailed("a", 0, {Failure(0)}, now_);
  state_->Answered("b", now_);
  Advance(milliseconds(800));
  EXPECT_EQ(View("a").restart_count, 1) << "b may still call again";
  Advance(milliseconds(400));
  EXPECT_EQ(View("a").restart_count, 0) << View("a").reason;
  EXPECT_NE(View("a").reason.find("no call within 1s of its last answer"), std::string::npos)
      << View("a").reason;
}

}  // namespace
}  // namespace ftrun::rendezvous
