#include "rendezvous/rendezvous_state.h"

#include <gtest/gtest.h>

namespace ftrun::rendezvous {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// A fake clock: tests move time explicitly and call Tick.
class RendezvousStateTest : public ::testing::Test {
 protected:
  JobSpec Spec(int min, int max, int max_restarts = 0) {
    JobSpec s;
    s.run_id = "job";
    s.min_nodes = min;
    s.max_nodes = max;
    s.max_restarts = max_restarts;
    s.last_call_timeout = seconds(30);
    s.join_timeout = seconds(600);
    s.liveness_timeout = seconds(15);
    s.disconnect_grace = seconds(1);
    s.fault_save = false;  // the save phase has its own tests below
    return s;
  }
  void Make(JobSpec spec) { state_.emplace(std::move(spec), now_); }
  NodeInfo Node(const std::string& id, int nproc = 2, int node_rank = -1, int port = 0) {
    NodeInfo n;
    n.node_id = id;
    n.addr = id + ".addr";
    n.host = id + ".host";
    n.node_rank = node_rank;
    n.nproc_per_node = nproc;
    n.free_port = port ? port : 1000 + static_cast<int>(id[0]);
    return n;
  }
  void Join(const std::string& id, int nproc = 2, int node_rank = -1) {
    auto refusal = state_->Join(Node(id, nproc, node_rank), now_);
    ASSERT_FALSE(refusal) << refusal->message;
  }
  void Advance(std::chrono::duration<double> d) {
    now_ += std::chrono::duration_cast<Clock::duration>(d);
    // Keep everyone alive unless a test says otherwise.
    for (const auto& id : alive_) state_->Seen(id, now_);
    state_->Tick(now_);
  }
  void StopAll(uint64_t round, const std::vector<std::string>& ids) {
    for (const auto& id : ids) state_->ReportStopped(id, round, 0, now_);
  }
  Phase phase() const { return state_->phase(); }
  NodeView View(const std::string& id) const { return state_->View(id); }
  WorkerFailure Failure(int rank, int exitcode = 1) {
    WorkerFailure f;
    f.rank = rank;
    f.exitcode = exitcode;
    f.host = "h";
    return f;
  }

  TimePoint now_ = TimePoint() + seconds(1000);
  std::optional<RendezvousState> state_;
  std::vector<std::string> alive_;
};

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
  EXPECT_EQ(b.assignment.master_addr, "a.addr");       // rank 0's address
  EXPECT_EQ(b.assignment.master_port, 1000 + 'a');     // and the free port it reported
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
  Advance(seconds(29));
  EXPECT_EQ(phase(), Phase::kForming);
  Advance(seconds(2));
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
  Advance(seconds(29));
  EXPECT_EQ(phase(), Phase::kForming);  // c's arrival started a new last call
  Advance(seconds(2));
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
  ASSERT_EQ(phase(), Phase::kRunning);   // re-formed at once, no last call
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
  alive_ = {"b", "c"};
  Advance(seconds(16));  // a is silent past the liveness timeout
  ASSERT_EQ(phase(), Phase::kStopping);
  EXPECT_NE(View("b").reason.find("a.host lost"), std::string::npos) << View("b").reason;
  StopAll(0, {"b"});
  ASSERT_EQ(phase(), Phase::kRunning);
  EXPECT_EQ(View("b").assignment.group_rank, 0);
  EXPECT_EQ(View("c").assignment.group_rank, 1);
  EXPECT_EQ(View("b").assignment.master_addr, "b.addr");
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
  EXPECT_NE(v.reason.find("worker rank 3 on h failed (exitcode 7); restart 1/1"),
            std::string::npos)
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
  // A new server (a restarted `ftrun master`): its nodes ran round 6 after 2 restarts.
  Make(Spec(2, 3, 5));
  NodeInfo a = Node("a");
  a.next_round = 7;
  a.restart_count = 2;
  ASSERT_FALSE(state_->Join(a, now_));
  EXPECT_EQ(View("a").round, 7u);
  EXPECT_EQ(View("a").restart_count, 2);
  NodeInfo b = Node("b");
  b.next_round = 5;  // behind: never takes the round back
  ASSERT_FALSE(state_->Join(b, now_));
  alive_ = {"a", "b"};
  Advance(seconds(31));
  ASSERT_EQ(phase(), Phase::kRunning);
  EXPECT_EQ(View("b").round, 7u);
  EXPECT_EQ(View("b").assignment.restart_count, 2);
  // Once a round runs, a late node's numbers change nothing.
  NodeInfo c = Node("c");
  c.next_round = 40;
  c.restart_count = 4;
  ASSERT_FALSE(state_->Join(c, now_));
  EXPECT_EQ(View("c").round, 7u);
  EXPECT_EQ(View("c").restart_count, 2);
}

// ---- the fault-time save between a running round and its stop ----

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
  EXPECT_NE(View("a").reason.find("save of step 5 failed on rank 0: disk full"),
            std::string::npos);
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
