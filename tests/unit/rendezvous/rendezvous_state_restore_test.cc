// RendezvousState: the flash-checkpoint restore step a round decides once from its members'
// inventories, kept current by every join and by the stopped reports that carry one (through
// ApplyReport, as both the gRPC server and the etcd leader apply them), learnt afresh by a
// restarted server from the rejoining nodes, and the replica order it hands out.
#include <gtest/gtest.h>

#include "rendezvous/apply_report.h"
#include "rendezvous/rendezvous_state.h"
#include "rendezvous/wire.h"
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
  // A stopped report as it comes off the wire (an etcd report key or a gRPC Report).
  static v1::ReportRequest Stopped(uint64_t round,
                                   std::optional<std::vector<FlashCopy>> flash = std::nullopt) {
    RoundReport r = RoundReport::Of(ReportKind::kStopped, round);
    r.flash = std::move(flash);
    v1::ReportRequest wire;
    ToWire(r, &wire);
    return wire;
  }
  Status Apply(const std::string& id, const v1::ReportRequest& wire) {
    return ApplyReport(*state_, id, wire, now_);
  }
  // A round of a and b running, a's worker failed: the round stops.
  uint64_t FailTheRound() {
    const uint64_t round = state_->round();
    state_->ReportFailed("a", round, {Failure(0)}, now_);
    EXPECT_EQ(phase(), Phase::kStopping);
    return round;
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
  // An older agent refreshes its inventory by a join of a known node, then reports stopped.
  JoinHolding("a", {{"", 0, {41, 40}}});
  JoinHolding("b", {{"", 0, {42, 41}}});
  StopAll(round, {"a", "b"});
  ASSERT_EQ(phase(), Phase::kRunning);
  EXPECT_GT(state_->round(), round);
  EXPECT_EQ(View("a").assignment.restore_copy, 42);
  EXPECT_EQ(View("b").assignment.restore_copy, 42);
}

TEST_F(RestoreTest, TheStoppedReportsInventoryDecidesTheNextRoundsStep) {
  Make(Spec(2, 2, 3));  // two nodes of two ranks: world size 4
  JoinHolding("a", {{"rank-0", 4, {3, 2}}, {"rank-1", 4, {3, 2}}});
  JoinHolding("b", {{"rank-2", 4, {3, 2}}, {"rank-3", 4, {3, 2}}});
  ASSERT_EQ(phase(), Phase::kRunning);
  EXPECT_EQ(View("a").assignment.restore_shards, 3);
  const uint64_t round = FailTheRound();
  // The workers saved on until they stopped; rank 3 holds 40 whole, not 41.
  ASSERT_TRUE(Apply("a", Stopped(round, std::vector<FlashCopy>{{"rank-0", 4, {41, 40, 39}},
                                                               {"rank-1", 4, {41, 40, 39}}})));
  ASSERT_TRUE(Apply("b", Stopped(round, std::vector<FlashCopy>{{"rank-2", 4, {41, 40}},
                                                               {"rank-3", 4, {40, 39}}})));
  ASSERT_EQ(phase(), Phase::kRunning);
  EXPECT_GT(state_->round(), round);
  for (const auto& id : {"a", "b"}) {
    EXPECT_EQ(View(id).assignment.restore_shards, 40) << id;
    EXPECT_EQ(View(id).assignment.restore_copy, -1) << id;
  }
}

TEST_F(RestoreTest, AStoppedReportWithoutAnInventoryLeavesTheStepToTheWorkers) {
  // An older agent's report: the inventory its join brought is from before its workers ran
  // (they may have let step 7 go since), so the round does not decide.
  Make(Spec(2, 2, 3));
  JoinHolding("a", {{"", 0, {7, 6}}});
  JoinHolding("b", {{"", 0, {5}}});
  const uint64_t round = FailTheRound();
  ASSERT_TRUE(Apply("a", Stopped(round)));
  // b now holds nothing: an empty inventory is still one.
  ASSERT_TRUE(Apply("b", Stopped(round, std::vector<FlashCopy>{})));
  ASSERT_EQ(phase(), Phase::kRunning);
  EXPECT_FALSE(View("a").assignment.restore_copy);
  EXPECT_FALSE(View("a").assignment.restore_shards);
}

TEST_F(RestoreTest, AnInventoryReadWhileTheWorkersRanDecidesNothing) {
  // A node claiming a running round (a rejoin, or a record a new etcd leader reads) brought an
  // inventory its workers have saved past: only the stopped reports decide the next round.
  Make(Spec(2, 2, 3));
  JoinHolding("a", {{"", 0, {3}}});
  JoinHolding("b", {{"", 0, {3}}});
  ASSERT_EQ(phase(), Phase::kRunning);
  EXPECT_EQ(View("a").assignment.restore_copy, 3);  // decided from joins before any worker ran
  NodeInfo again = Node("a");
  again.flash = {{"", 0, {3}}};
  again.flash_reported = true;
  again.running = View("a").assignment;
  ASSERT_FALSE(state_->Join(again, now_));
  const uint64_t round = FailTheRound();
  ASSERT_TRUE(Apply("a", Stopped(round)));
  ASSERT_TRUE(Apply("b", Stopped(round, std::vector<FlashCopy>{{"", 0, {9, 8}}})));
  ASSERT_EQ(phase(), Phase::kRunning);
  EXPECT_FALSE(View("b").assignment.restore_copy) << "a's step 3 is stale";
  const uint64_t next = state_->round();
  state_->ReportFailed("a", next, {Failure(0)}, now_);
  ASSERT_TRUE(Apply("a", Stopped(next, std::vector<FlashCopy>{{"", 0, {12, 11}}})));
  ASSERT_TRUE(Apply("b", Stopped(next, std::vector<FlashCopy>{{"", 0, {12}}})));
  ASSERT_EQ(phase(), Phase::kRunning);
  EXPECT_EQ(View("b").assignment.restore_copy, 12);
}

TEST_F(RestoreTest, AStoppedReportWithAnInventoryBeyondTheLimitsIsRefusedAndChangesNothing) {
  Make(Spec(2, 2, 3));
  JoinHolding("a", {{"", 0, {7}}});
  JoinHolding("b", {{"", 0, {5}}});
  const uint64_t round = FailTheRound();
  std::vector<FlashCopy> many(kMaxFlashCopies + 1, FlashCopy{"rank-0", 1, {99}});
  std::vector<FlashCopy> steps = {{"", 0, {99, 8, 7, 6, 5, 4, 3, 2, 1}}};
  std::vector<FlashCopy> name = {{std::string(kMaxFlashGroupBytes + 1, 'g'), 0, {99}}};
  std::vector<FlashCopy> negative = {{"", 0, {99, -1}}};
  for (const auto& inventory : {many, steps, name, negative}) {
    auto s = Apply("a", Stopped(round, inventory));
    ASSERT_FALSE(s);
    EXPECT_NE(s.error().message.find("flash checkpoint"), std::string::npos) << s.error().message;
  }
  EXPECT_EQ(phase(), Phase::kStopping);  // a refused report counts for nothing
  ASSERT_TRUE(Apply("a", Stopped(round, std::vector<FlashCopy>{{"", 0, {7}}})));
  ASSERT_TRUE(Apply("b", Stopped(round, std::vector<FlashCopy>{{"", 0, {5}}})));
  ASSERT_EQ(phase(), Phase::kRunning);
  EXPECT_EQ(View("a").assignment.restore_copy, 7);  // not 99
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

// The job's run start (Assignment::run_started_ms): the earliest any node reported, so that a
// node that joined late tells this run's checkpoints from an earlier run's as the others do.
TEST_F(RestoreTest, TheRoundCarriesTheEarliestRunStartAnyNodeReported) {
  auto join_started = [&](const std::string& id, int64_t started) {
    NodeInfo n = Node(id);
    n.run_started_ms = started;
    auto refusal = state_->Join(n, now_);
    ASSERT_FALSE(refusal) << refusal->message;
  };
  Make(Spec(2, 2, 3));
  join_started("a", 5000);
  join_started("b", 3000);
  ASSERT_EQ(phase(), Phase::kRunning);
  EXPECT_EQ(View("a").assignment.run_started_ms, 3000);
  EXPECT_EQ(View("b").assignment.run_started_ms, 3000);
  // A spare whose clock says it started earlier: the running round keeps its value (all its
  // members go by one time), the next round takes the earlier one.
  join_started("s", 1000);
  EXPECT_EQ(View("a").assignment.run_started_ms, 3000);
  uint64_t round = FailTheRound();
  state_->Leave("b", now_);
  ASSERT_TRUE(Apply("a", Stopped(round)));
  ASSERT_EQ(phase(), Phase::kRunning);
  ASSERT_GT(state_->round(), round);
  EXPECT_EQ(View("s").assignment.run_started_ms, 1000);
  // s is lost; its replacement started later: the next round keeps the earliest start.
  round = FailTheRound();
  state_->Leave("s", now_);
  join_started("c", 9000);
  ASSERT_TRUE(Apply("a", Stopped(round)));
  ASSERT_EQ(phase(), Phase::kRunning);
  ASSERT_GT(state_->round(), round);
  EXPECT_EQ(View("c").assignment.run_started_ms, 1000);
  // A restarted server learns it back from the rejoining agents, which kept it; a refused
  // join changes nothing.
  Make(Spec(2, 2, 3));
  NodeInfo refused = Node("x", /*nproc=*/0);
  refused.run_started_ms = 10;
  ASSERT_TRUE(state_->Join(refused, now_));
  join_started("c", 1000);
  join_started("d", 0);
  ASSERT_EQ(phase(), Phase::kRunning);
  EXPECT_EQ(View("d").assignment.run_started_ms, 1000);
}

}  // namespace
}  // namespace ftrun::rendezvous
