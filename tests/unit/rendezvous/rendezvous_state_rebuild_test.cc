// RendezvousState on a fake clock: a restarted server rebuilding the round its rejoining nodes
// still run (NodeInfo::running), and giving it up when it cannot.
#include <gtest/gtest.h>

#include "rendezvous/rendezvous_state.h"
#include "tests/unit/rendezvous/rendezvous_state_fixture.h"

namespace ftrun::rendezvous {
namespace {

using std::chrono::seconds;

class RebuildTest : public RendezvousStateTest {
 protected:
  // What a node of round `round` (group rank `rank` of `nodes`, 2 workers each) says when it
  // rejoins while its workers run.
  NodeInfo Claimant(const std::string& id, uint64_t round, int rank, int nodes = 2,
                    int restarts = 1) {
    NodeInfo n = Node(id);
    n.next_round = round + 1;
    n.restart_count = restarts;
    NodeAssignment a;
    a.round = round;
    a.restart_count = restarts;
    a.group_rank = rank;
    a.group_world_size = nodes;
    a.base_rank = 2 * rank;
    a.world_size = 2 * nodes;
    a.master_addr = "old.addr";
    a.master_port = 4242;
    n.running = a;
    return n;
  }
  void Rejoin(const NodeInfo& n) {
    auto refusal = state_->Join(n, now_);
    ASSERT_FALSE(refusal) << refusal->message;
  }
  std::vector<StateEvent> events() { return state_->TakeEvents(); }
};

TEST_F(RebuildTest, EveryRankClaimedTakesTheRoundOverUnchanged) {
  Make(Spec(2, 2, 3));
  Rejoin(Claimant("b", 5, 1));
  // Until a has rejoined, b's workers go on: its view is its own assignment, running.
  EXPECT_TRUE(state_->Rebuilding());
  EXPECT_EQ(phase(), Phase::kForming);
  NodeView vb = View("b");
  EXPECT_EQ(vb.phase, Phase::kRunning);
  EXPECT_TRUE(vb.member);
  EXPECT_EQ(vb.round, 5u);
  EXPECT_EQ(vb.assignment.group_rank, 1);
  EXPECT_EQ(vb.assignment.master_port, 4242);
  Rejoin(Claimant("a", 5, 0));
  EXPECT_FALSE(state_->Rebuilding());
  ASSERT_EQ(phase(), Phase::kRunning);
  EXPECT_EQ(state_->round(), 5u);
  EXPECT_EQ(state_->world_size(), 4);
  NodeView va = View("a");
  EXPECT_EQ(va.assignment.group_rank, 0);
  EXPECT_EQ(va.assignment.master_addr, "old.addr");
  EXPECT_EQ(va.assignment.master_port, 4242);
  EXPECT_EQ(va.restart_count, 1);
  EXPECT_EQ(View("b").assignment.base_rank, 2);
  bool rebuilt = false;
  for (const auto& e : events()) {
    if (auto* f = std::get_if<RoundFormed>(&e)) rebuilt = f->rebuilt;
  }
  EXPECT_TRUE(rebuilt);
  // The job goes on as any other: both succeed.
  state_->ReportSucceeded("a", 5, now_);
  state_->ReportSucceeded("b", 5, now_);
  EXPECT_EQ(phase(), Phase::kSucceeded);
}

TEST_F(RebuildTest, AFailureAfterTheRebuildSpendsTheNextRestart) {
  Make(Spec(2, 2, 3));
  Rejoin(Claimant("a", 5, 0, 2, 2));
  Rejoin(Claimant("b", 5, 1, 2, 2));
  ASSERT_EQ(phase(), Phase::kRunning);
  state_->ReportFailed("b", 5, {Failure(3)}, now_);
  EXPECT_EQ(phase(), Phase::kStopping);
  EXPECT_EQ(View("a").restart_count, 3);
  StopAll(5, {"a", "b"});
  EXPECT_EQ(phase(), Phase::kRunning);
  EXPECT_EQ(state_->round(), 6u);
}

TEST_F(RebuildTest, AMissingRankIsGivenUpAfterTheLivenessTimeout) {
  Make(Spec(1, 2, 3));
  Rejoin(Claimant("a", 5, 0));
  alive_ = {"a"};
  Advance(seconds(14));
  EXPECT_TRUE(state_->Rebuilding());
  Advance(seconds(2));
  EXPECT_FALSE(state_->Rebuilding());
  bool given_up = false;
  for (const auto& e : events()) given_up |= std::holds_alternative<RebuildGivenUp>(e);
  EXPECT_TRUE(given_up);
  // The next round forms as a first one does (a last call below MAX), numbered on.
  EXPECT_EQ(phase(), Phase::kForming);
  EXPECT_EQ(View("a").round, 6u);
  EXPECT_FALSE(View("a").member);
  RunOutTheLastCall();
  ASSERT_EQ(phase(), Phase::kRunning);
  EXPECT_EQ(View("a").assignment.round, 6u);
  EXPECT_EQ(View("a").restart_count, 1) << "giving up the rebuild spends no restart";
}

TEST_F(RebuildTest, DisagreeingClaimsGiveTheRebuildUp) {
  Make(Spec(2, 2, 3));
  Rejoin(Claimant("a", 5, 0));
  NodeInfo b = Claimant("b", 5, 0);  // the same group rank
  Rejoin(b);
  EXPECT_FALSE(state_->Rebuilding());
  ASSERT_EQ(phase(), Phase::kRunning);  // both are here: the next round forms at once
  EXPECT_EQ(state_->round(), 6u);
}

TEST_F(RebuildTest, AMemberRejoiningWithoutItsWorkersRunningGivesTheRebuildUp) {
  Make(Spec(2, 2, 3));
  Rejoin(Claimant("a", 5, 0));
  NodeInfo b = Node("b");
  b.next_round = 6;  // it ran round 5, but its workers stopped
  Rejoin(b);
  EXPECT_FALSE(state_->Rebuilding());
  EXPECT_EQ(phase(), Phase::kRunning);
  EXPECT_EQ(state_->round(), 6u);
}

TEST_F(RebuildTest, AClaimantLeavingGivesTheRebuildUp) {
  Make(Spec(1, 2, 3));
  Rejoin(Claimant("a", 5, 0));
  state_->Leave("a", now_);
  EXPECT_FALSE(state_->Rebuilding());
}

TEST_F(RebuildTest, ClaimsAreBoundedAndOnlyTakenBeforeARoundOfItsOwn) {
  Make(Spec(2, 2, 3));
  Rejoin(Claimant("a", RendezvousStateTest::Spec(1, 1).max_nodes + 2'000'000, 0));
  EXPECT_FALSE(state_->Rebuilding()) << "a round number no job reaches";
  Make(Spec(2, 2, 3));
  NodeInfo big = Claimant("a", 5, 0, 9);  // more nodes than --nnodes MAX
  Rejoin(big);
  EXPECT_FALSE(state_->Rebuilding());
  // A claimed restart count never exceeds --max-restarts.
  Make(Spec(2, 2, 3));
  Rejoin(Claimant("a", 5, 0, 2, 99));
  EXPECT_EQ(View("a").restart_count, 3);
  // A server that formed a round of its own takes no claim.
  Make(Spec(2, 2, 3));
  Join("x");
  Join("y");
  ASSERT_EQ(phase(), Phase::kRunning);
  Rejoin(Claimant("z", 5, 0));
  EXPECT_EQ(state_->round(), 0u);
  EXPECT_FALSE(View("z").member);
}

TEST_F(RebuildTest, ReportsForTheRoundCountOnceItIsRebuilt) {
  Make(Spec(2, 2, 3));
  Rejoin(Claimant("a", 5, 0));
  Rejoin(Claimant("b", 5, 1));
  state_->ReportSucceeded("a", 5, now_);
  EXPECT_EQ(phase(), Phase::kRunning);
  state_->ReportSucceeded("b", 5, now_);
  EXPECT_EQ(phase(), Phase::kSucceeded);
}

}  // namespace
}  // namespace ftrun::rendezvous
