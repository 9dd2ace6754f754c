// RendezvousState on a fake clock: forming rounds, membership, failures, restarts, static ranks.
#include "rendezvous/rendezvous_state.h"

#include <gtest/gtest.h>

#include "tests/unit/rendezvous/rendezvous_state_fixture.h"

namespace ftrun::rendezvous {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST_F(RendezvousStateTest, CompletesAtMaxAtOnce) {
  Make(Spec(2, 2));
  Join("a");
  EXPECT_EQ(phase(), Phase::kForming);
  EXPECT_EQ(View("a").nodes_joined, 1);
  Join("b");
  EXPECT_EQ(phase(), Phase::kRunning);
  auto a = View("a"), b = View("b");
  ASSERT_TRUE(a.member && b.member);
  EXPECT_EQ(a.assignment.group_rank, 0);
  EXPECT_EQ(b.assignment.group_rank, 1);
  EXPECT_EQ(b.assignment.base_rank, 2);
  EXPECT_EQ(b.assignment.world_size, 4);
  EXPECT_EQ(b.assignment.group_world_size, 2);
  EXPECT_EQ(b.assignment.master_addr, "a.addr");    // rank 0's address
  EXPECT_EQ(b.assignment.master_port, 1000 + 'a');  // and the free port it reported
  EXPECT_EQ(b.assignment.round, 0u);
  EXPECT_EQ(b.assignment.restart_count, 0);
}

TEST_F(RendezvousStateTest, CompletesAtMinAfterLastCall) {
  Make(Spec(2, 4));
  Join("a");
  Join("b");
  EXPECT_EQ(phase(), Phase::kForming);
  ASSERT_TRUE(state_->NextDeadline());
  alive_ = {"a", "b"};
  RunOutTheLastCall();
  EXPECT_EQ(phase(), Phase::kRunning);
  EXPECT_EQ(View("b").assignment.group_world_size, 2);
}

TEST_F(RendezvousStateTest, LastCallIsClearedWhenBelowMinAgain) {
  Make(Spec(2, 4));
  Join("a");
  Join("b");
  state_->Leave("b", now_);
  alive_ = {"a"};
  Advance(seconds(31));
  EXPECT_EQ(phase(), Phase::kForming);
  Join("c");
  alive_ = {"a", "c"};
  RunOutTheLastCall();  // c's arrival started a new last call
  EXPECT_EQ(phase(), Phase::kRunning);
}

TEST_F(RendezvousStateTest, NodeUnitRoundsTheRoundDownToAMultiple) {
  JobSpec spec = Spec(2, 8);
  spec.node_unit = 2;
  Make(spec);
  alive_ = {"a", "b", "c"};
  Join("a");
  Join("b");
  Join("c");
  Advance(seconds(31));  // the last call ends with 3 nodes: a round of 2, c waits
  ASSERT_EQ(phase(), Phase::kRunning);
  EXPECT_EQ(View("a").assignment.group_world_size, 2);
  EXPECT_FALSE(View("c").member);
  EXPECT_EQ(View("c").nodes_waiting, 1);
  // One more node makes a whole unit: the round re-forms with 4.
  alive_.push_back("d");
  Join("d");
  EXPECT_EQ(phase(), Phase::kStopping);
  StopAll(View("a").assignment.round, {"a", "b"});
  Advance(milliseconds(10));
  ASSERT_EQ(phase(), Phase::kRunning);
  EXPECT_EQ(View("a").assignment.group_world_size, 4);
}

// Below MAX a node outside the round waits for a whole --node-unit: it is not a spare (view,
// status); at MAX the ones beyond it are.
TEST_F(RendezvousStateTest, ANodeWaitingForANodeUnitIsNotASpare) {
  JobSpec spec = Spec(2, 4);
  spec.node_unit = 2;
  Make(spec);
  alive_ = {"a", "b", "c"};
  Join("a");
  Join("b");
  Join("c");
  Advance(seconds(31));
  ASSERT_EQ(phase(), Phase::kRunning);
  EXPECT_FALSE(View("c").member);
  EXPECT_FALSE(View("c").spare);
  EXPECT_EQ(View("c").nodes_waiting, 1);
  EXPECT_EQ(View("c").nodes_spare, 0);
  auto status = state_->Status(now_);
  ASSERT_EQ(status.nodes.size(), 3u);
  EXPECT_EQ(status.nodes[2].node_id, "c");
  EXPECT_FALSE(status.nodes[2].spare);
  // d makes a whole unit: a round of 4 (MAX); e and f come beyond it and are spares.
  for (const char* n : {"d", "e", "f"}) {
    alive_.push_back(n);
    Join(n);
  }
  StopAll(View("a").assignment.round, {"a", "b"});
  Advance(milliseconds(10));
  ASSERT_EQ(phase(), Phase::kRunning);
  ASSERT_EQ(View("a").assignment.group_world_size, 4);
  for (const char* n : {"e", "f"}) {
    EXPECT_FALSE(View(n).member) << n;
    EXPECT_TRUE(View(n).spare) << n;
  }
  EXPECT_FALSE(View("a").spare);
  EXPECT_EQ(View("e").nodes_waiting, 2);
  EXPECT_EQ(View("e").nodes_spare, 2);
  status = state_->Status(now_);
  int spares = 0;
  for (const auto& n : status.nodes) spares += n.spare;
  EXPECT_EQ(spares, 2);
}

TEST_F(RendezvousStateTest, NodeUnitWaitsWhileLessThanAUnitIsHere) {
  JobSpec spec = Spec(1, 4);
  spec.node_unit = 2;
  Make(spec);
  alive_ = {"a"};
  Join("a");
  Advance(seconds(60));
  EXPECT_EQ(phase(), Phase::kForming);  // 1 node is not a unit of 2
  alive_.push_back("b");
  Join("b");
  Advance(seconds(31));
  EXPECT_EQ(phase(), Phase::kRunning);
  EXPECT_EQ(View("b").assignment.group_world_size, 2);
}

TEST_F(RendezvousStateTest, JoinTimeoutFailsTheJobWithAClearReason) {
  Make(Spec(2, 2));
  Join("a");
  alive_ = {"a"};
  for (int i = 0; i < 600; ++i) Advance(seconds(1));
  EXPECT_EQ(phase(), Phase::kFailed);
  EXPECT_NE(View("a").reason.find("join_timeout=600s"), std::string::npos) << View("a").reason;
  EXPECT_NE(View("a").reason.find("1 node(s) joined, --nnodes is 2"), std::string::npos);
  EXPECT_FALSE(state_->NextDeadline());
}

TEST_F(RendezvousStateTest, NewNodeWhileRunningBelowMaxStartsANewRoundWithoutARestart) {
  Make(Spec(1, 3, /*max_restarts=*/0));
  Join("a");
  Join("b");
  alive_ = {"a", "b"};
  Advance(seconds(31));
  ASSERT_EQ(phase(), Phase::kRunning);
  Join("c");
  EXPECT_EQ(phase(), Phase::kStopping);
  EXPECT_NE(View("a").reason.find("c.host joined"), std::string::npos);
  StopAll(0, {"a"});
  EXPECT_EQ(phase(), Phase::kStopping);  // b has not stopped yet
  StopAll(0, {"b"});
  ASSERT_EQ(phase(), Phase::kRunning);            // re-formed at once, no last call
  EXPECT_EQ(View("c").assignment.group_rank, 2);  // newcomers after the survivors
  EXPECT_EQ(View("a").assignment.group_rank, 0);
  EXPECT_EQ(View("a").assignment.round, 1u);
  EXPECT_EQ(View("a").restart_count, 0);
}

TEST_F(RendezvousStateTest, SpareWaitsAtMaxAndFillsTheNextGap) {
  Make(Spec(1, 2));
  Join("a");
  Join("b");
  ASSERT_EQ(phase(), Phase::kRunning);
  Join("c");
  EXPECT_EQ(phase(), Phase::kRunning);  // a spare does not disturb the round
  EXPECT_FALSE(View("c").member);
  EXPECT_EQ(View("c").nodes_waiting, 1);
  EXPECT_TRUE(View("c").spare);
  EXPECT_EQ(View("c").nodes_spare, 1);
  alive_ = {"b", "c"};
  Advance(seconds(16));  // a is silent past the liveness timeout
  ASSERT_EQ(phase(), Phase::kStopping);
  EXPECT_NE(View("b").reason.find("a.host lost"), std::string::npos) << View("b").reason;
  StopAll(0, {"b"});
  ASSERT_EQ(phase(), Phase::kRunning);
  EXPECT_EQ(View("c").assignment.group_rank, 0);  // the spare takes the lost node's place
  EXPECT_EQ(View("b").assignment.group_rank, 1);  // and the survivor keeps its own
  EXPECT_EQ(View("c").assignment.master_addr, "c.addr");
  EXPECT_EQ(View("b").restart_count, 0);
}

TEST_F(RendezvousStateTest, DuplicateJoinIsIdempotent) {
  Make(Spec(2, 2));
  Join("a");
  uint64_t v = state_->version();
  Join("a");
  EXPECT_EQ(state_->version(), v);
  EXPECT_EQ(state_->node_count(), 1u);
}

TEST_F(RendezvousStateTest, FailureRestartsUntilRestartsAreExhausted) {
  Make(Spec(2, 2, /*max_restarts=*/1));
  Join("a");
  Join("b");
  state_->ReportFailed("b", 0, {Failure(3, 7)}, now_);
  ASSERT_EQ(phase(), Phase::kStopping);
  auto v = View("a");
  EXPECT_EQ(v.restart_count, 1);
  ASSERT_EQ(v.failures.size(), 1u);
  EXPECT_NE(v.reason.find("worker rank 3 on h failed (exitcode 7); restart 1/1"), std::string::npos)
      << v.reason;
  StopAll(0, {"a", "b"});
  ASSERT_EQ(phase(), Phase::kRunning);
  EXPECT_EQ(View("b").assignment.restart_count, 1);
  EXPECT_EQ(View("b").assignment.round, 1u);
  state_->ReportFailed("a", 1, {Failure(0)}, now_);
  EXPECT_EQ(phase(), Phase::kFailed);
  EXPECT_NE(View("b").reason.find("restarts exhausted (1/1)"), std::string::npos);
  EXPECT_EQ(View("b").failures.size(), 1u);
  EXPECT_EQ(View("b").failures[0].rank, 0);
}

TEST_F(RendezvousStateTest, FailuresDuringTheStopAreListedNotRestartedAgain) {
  Make(Spec(2, 2, 5));
  Join("a");
  Join("b");
  state_->ReportFailed("a", 0, {Failure(0)}, now_);
  state_->ReportFailed("b", 0, {Failure(2)}, now_);
  EXPECT_EQ(View("a").restart_count, 1);
  EXPECT_EQ(View("a").failures.size(), 2u);
}

TEST_F(RendezvousStateTest, StaleRoundMessagesAreIgnored) {
  Make(Spec(2, 2, 5));
  Join("a");
  Join("b");
  state_->ReportFailed("a", 0, {Failure(0)}, now_);
  StopAll(0, {"a", "b"});
  ASSERT_EQ(state_->round(), 1u);
  uint64_t v = state_->version();
  state_->ReportFailed("b", 0, {Failure(2)}, now_);  // from the previous round
  state_->ReportSucceeded("b", 0, now_);
  state_->ReportStopped("b", 0, 0, now_);
  EXPECT_EQ(state_->version(), v);
  EXPECT_EQ(phase(), Phase::kRunning);
  state_->ReportFailed("nobody", 1, {Failure(2)}, now_);
  EXPECT_EQ(phase(), Phase::kRunning);
}

TEST_F(RendezvousStateTest, SucceedsWhenEveryMemberSucceeded) {
  Make(Spec(2, 2));
  Join("a");
  Join("b");
  state_->ReportSucceeded("a", 0, now_);
  EXPECT_EQ(phase(), Phase::kRunning);
  state_->ReportSucceeded("b", 0, now_);
  EXPECT_EQ(phase(), Phase::kSucceeded);
  EXPECT_TRUE(state_->finished());
}

TEST_F(RendezvousStateTest, StaticRanksFollowNodeRankNotJoinOrder) {
  JobSpec s = Spec(3, 3);
  s.static_ranks = true;
  s.master_addr = "10.0.0.1";
  Make(s);
  Join("x", 2, 2);
  Join("y", 2, 0);
  EXPECT_EQ(phase(), Phase::kForming);
  Join("z", 2, 1);
  ASSERT_EQ(phase(), Phase::kRunning);
  EXPECT_EQ(View("x").assignment.group_rank, 2);
  EXPECT_EQ(View("x").assignment.base_rank, 4);
  EXPECT_EQ(View("y").assignment.group_rank, 0);
  EXPECT_EQ(View("z").assignment.master_addr, "10.0.0.1");
  EXPECT_EQ(View("z").assignment.master_port, 1000 + 'y');
}

TEST_F(RendezvousStateTest, StaticRefusals) {
  JobSpec s = Spec(2, 2);
  s.static_ranks = true;
  Make(s);
  Join("a", 2, 0);
  auto dup = state_->Join(Node("b", 2, 0), now_);
  ASSERT_TRUE(dup);
  EXPECT_EQ(dup->kind, JoinRefusal::Kind::kRetry);
  EXPECT_NE(dup->message.find("node rank 0 is held by a.host"), std::string::npos);
  auto range = state_->Join(Node("c", 2, 2), now_);
  ASSERT_TRUE(range);
  EXPECT_EQ(range->kind, JoinRefusal::Kind::kMismatch);
  EXPECT_NE(range->message.find("--node-rank 2"), std::string::npos);
  // Once the holder is gone, its rank is free again.
  state_->Leave("a", now_);
  EXPECT_FALSE(state_->Join(Node("b", 2, 0), now_));
}

TEST_F(RendezvousStateTest, NprocMismatchNamesBothValues) {
  Make(Spec(2, 2));
  Join("a", 4);
  auto r = state_->Join(Node("b", 8), now_);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->message, "--nproc-per-node 8 on b.host differs from the job's 4");
}

TEST_F(RendezvousStateTest, MasterPortIsRefreshedEachRound) {
  Make(Spec(1, 1, 2));
  Join("a");
  EXPECT_EQ(View("a").assignment.master_port, 1000 + 'a');
  state_->ReportFailed("a", 0, {Failure(0)}, now_);
  state_->ReportStopped("a", 0, 4242, now_);
  ASSERT_EQ(phase(), Phase::kRunning);
  EXPECT_EQ(View("a").assignment.master_port, 4242);
}

TEST_F(RendezvousStateTest, LostMemberDuringStoppingOwesNoReport) {
  Make(Spec(1, 3, 1));
  Join("a");
  Join("b");
  Join("c");
  state_->ReportFailed("a", 0, {Failure(0)}, now_);
  StopAll(0, {"a", "b"});
  EXPECT_EQ(phase(), Phase::kStopping);
  state_->Leave("c", now_);
  ASSERT_EQ(phase(), Phase::kRunning);
  EXPECT_EQ(View("b").assignment.group_world_size, 2);
}

TEST_F(RendezvousStateTest, ScaleOfTenThousandJoins) {
  Make(Spec(10000, 10000));
  for (int i = 0; i < 10000; ++i) {
    ASSERT_FALSE(state_->Join(Node("n" + std::to_string(i), 8), now_));
  }
  ASSERT_EQ(phase(), Phase::kRunning);
  auto v = View("n9999");
  EXPECT_EQ(v.assignment.group_rank, 9999);
  EXPECT_EQ(v.assignment.base_rank, 79992);
  EXPECT_EQ(v.assignment.world_size, 80000);
}

TEST_F(RendezvousStateTest, NodesOfARestartedServerCarryRoundAndRestartsOn) {
  // A node that says which round it would run next and after how many restarts.
  auto join = [&](const std::string& id, uint64_t next_round, int restart_count) {
    NodeInfo n = Node(id);
    n.next_round = next_round;
    n.restart_count = restart_count;
    ASSERT_FALSE(state_->Join(n, now_));
  };
  // A new server (a restarted `ftrun master`): its nodes ran round 6 after 2 restarts.
  Make(Spec(2, 3, 5));
  join("a", 7, 2);
  EXPECT_EQ(View("a").round, 7u);
  EXPECT_EQ(View("a").restart_count, 2);
  join("b", 5, 0);  // behind: never takes the round back
  alive_ = {"a", "b"};
  Advance(seconds(31));
  ASSERT_EQ(phase(), Phase::kRunning);
  EXPECT_EQ(View("b").round, 7u);
  EXPECT_EQ(View("b").assignment.restart_count, 2);
  // Once a round runs, a late node's numbers change nothing.
  join("c", 40, 4);
  EXPECT_EQ(View("c").round, 7u);
  EXPECT_EQ(View("c").restart_count, 2);
}

// A leader that takes over in etcd knows no earlier round: the group ranks the nodes say they
// had keep the survivors' places (stable ranks) and a newcomer takes the lost node's place,
// whatever the order they join in.
TEST_F(RendezvousStateTest, AStateWithoutAnEarlierRoundKeepsTheGroupRanksTheNodesClaim) {
  Make(Spec(3, 3));
  EXPECT_EQ(Form({{"a", 2}, {"spare", -1}, {"c", 0}}),
            (std::map<std::string, int>{{"c", 0}, {"spare", 1}, {"a", 2}}));
}

// Claims that cannot be kept are a newcomer's: a place beyond the round, or one an earlier
// joiner claimed too.
TEST_F(RendezvousStateTest, ClaimsThatCannotBeKeptJoinInJoiningOrder) {
  Make(Spec(2, 2));
  EXPECT_EQ(Form({{"a", 1}, {"b", 1}}), (std::map<std::string, int>{{"b", 0}, {"a", 1}}));
  Make(Spec(2, 2));
  EXPECT_EQ(Form({{"far", 7}, {"d", -1}}), (std::map<std::string, int>{{"far", 0}, {"d", 1}}));
}

}  // namespace
}  // namespace ftrun::rendezvous
