// RendezvousState: the flash-checkpoint restore step a round decides once from its members'
// inventories, kept current by every join (the refresh before a stopped report), learnt
// afresh by a restarted server from the rejoining nodes, and the replica order it hands out.
#include <gtest/gtest.h>

#include "rendezvous/rendezvous_state.h"
#include "tests/unit/rendezvous/rendezvous_state_fixture.h"

namespace ftrun::rendezvous {
namespace {

class RestoreTest : public RendezvousStateTest {
 protected:
  void JoinHolding(const std::string& id, std::vector<FlashCopy> copies,
                   const std::string& switch_path = "", int replica_port = 0) {
    NodeInfo n = Node(id);
    n.flash = std::move(copies);
    n.flash_reported = true;
    n.switch_path = switch_path;
    n.replica_port = replica_port;
    auto refusal = state_->Join(n, now_);
    ASSERT_FALSE(refusal) << refusal->message;
  }
};

TEST_F(RestoreTest, TheRoundCarriesTheNewestStepEveryShardIsHeldAt) {
  Make(Spec(2, 2, 3));
  JoinHolding("a", {{"rank-0", 4, {8, 7}}, {"rank-1", 4, {8, 7}}, {"rank-2", 0, {7}}});
  JoinHolding("b", {{"rank-2", 4, {8}}, {"rank-3", 4, {7}}});
  ASSERT_EQ(phase(), Phase::kRunning);
  for (const auto& id : {"a", "b"}) {
    const NodeAssignment a = View(id).assignment;
    EXPECT_EQ(a.restore_shards, 7) << id;  // rank-3 holds 7 only
    EXPECT_EQ(a.restore_copy, -1) << id;
  }
  EXPECT_FALSE(View("c").assignment.restore_shards);  // not a member: told nothing
}

TEST_F(RestoreTest, AJoinBeforeTheStoppedReportKeepsTheDecisionCurrent) {
  Make(Spec(2, 2, 3));
  JoinHolding("a", {});
  JoinHolding("b", {});
  ASSERT_EQ(phase(), Phase::kRunning);
  EXPECT_EQ(View("a").assignment.restore_copy, -1);  // a fresh job: nothing in memory
  const uint64_t round = state_->round();
  state_->ReportFailed("a", round, {Failure(0)}, now_);
  ASSERT_EQ(phase(), Phase::kStopping);
  // Each agent refreshes its inventory (a join of a known node), then reports stopped.
  JoinHolding("a", {{"", 0, {41, 40}}});
  JoinHolding("b", {{"", 0, {42, 41}}});
  StopAll(round, {"a", "b"});
  ASSERT_EQ(phase(), Phase::kRunning);
  EXPECT_GT(state_->round(), round);
  EXPECT_EQ(View("a").assignment.restore_copy, 42);
  EXPECT_EQ(View("b").assignment.restore_copy, 42);
}

TEST_F(RestoreTest, ARestartedServerLearnsTheStepsFromTheNodesJoiningAgain) {
  // The new server knows no earlier round; the agents bring their inventories (their workers
  // have stopped, so they claim no round).
  Make(Spec(2, 2, 3));
  NodeInfo a = Node("a");
  a.next_round = 5;
  a.restart_count = 1;
  a.flash = {{"rank-0", 4, {120, 119}}, {"rank-1", 4, {120, 119}}};
  a.flash_reported = true;
  ASSERT_FALSE(state_->Join(a, now_));
  JoinHolding("b", {{"rank-2", 4, {120}}, {"rank-3", 4, {120, 119}}});
  ASSERT_EQ(phase(), Phase::kRunning);
  EXPECT_EQ(state_->round(), 5u);
  EXPECT_EQ(View("b").assignment.restore_shards, 120);
}

TEST_F(RestoreTest, AnOlderAgentInTheRoundLeavesTheStepUndecided) {
  Make(Spec(2, 2));
  JoinHolding("a", {{"", 0, {3}}});
  Join("b");  // no inventory reported
  ASSERT_EQ(phase(), Phase::kRunning);
  EXPECT_FALSE(View("a").assignment.restore_copy);
  EXPECT_FALSE(View("a").assignment.restore_shards);
}

TEST_F(RestoreTest, ReplicasGoUnderADifferentSwitchFirst) {
  JobSpec spec = Spec(4, 4);
  spec.replica_key = "the-job-key-0123456789abcdef0123";
  Make(spec);
  JoinHolding("a", {}, "asw-1/psw-0", 4001);
  JoinHolding("b", {}, "asw-2/psw-0", 4002);
  JoinHolding("c", {}, "asw-1/psw-0", 4003);
  JoinHolding("d", {}, "asw-2/psw-0", 4004);
  ASSERT_EQ(phase(), Phase::kRunning);
  // Group ranks follow the switches: a, c under asw-1 (0, 1), b, d under asw-2 (2, 3).
  const NodeAssignment a = View("a").assignment;
  ASSERT_EQ(a.replica_peers.size(), 4u);
  EXPECT_EQ(a.replica_peers[0], "a.addr:4001");
  EXPECT_EQ(a.replica_order, (std::vector<int>{2, 3, 1}));
  EXPECT_EQ(View("d").assignment.replica_order, (std::vector<int>{0, 1, 2}));
}

}  // namespace
}  // namespace ftrun::rendezvous
