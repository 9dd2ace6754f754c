// The agent's lifecycle transitions: join, start, success, failure and restart, stop with a
// grace, scale up and down, a signal, the budget spent, an excluded node, the master lost.
#include <csignal>

#include "tests/unit/launcher/agent/agent_fixture.h"

namespace ftrun::testing {
namespace {

TEST_F(AgentTest, StartJoinsTheJobAndWaits) {
  StartAgent();
  EXPECT_EQ(log->started, 1);
  EXPECT_EQ(agent->state(), AgentState::kWaiting);
  EXPECT_EQ(spawner.spawned, 0);
}

TEST_F(AgentTest, AWarmSparePreparesTheWorkersItWouldStartWhileItWaits) {
  config.warm_restart.enabled = true;
  StartAgent();
  agent->OnWaitingAsSpare(0);
  Settle();
  ASSERT_EQ(spawner.prepared.size(), 1u);
  ASSERT_EQ(spawner.prepared[0].size(), 2u);
  EXPECT_EQ(spawner.prepared[0][0].program, "worker");
  EXPECT_EQ(spawner.spawned, 0) << "nothing starts before the promotion";
  EXPECT_EQ(agent->state(), AgentState::kWaiting);
  StartRound(1);  // promoted
  EXPECT_EQ(spawner.spawned, 2);
  agent->OnWaitingAsSpare(2);  // a stale announcement while its workers run
  Settle();
  EXPECT_EQ(spawner.prepared.size(), 1u);
}

TEST_F(AgentTest, AColdSparePreparesNothing) {
  StartAgent();
  agent->OnWaitingAsSpare(0);
  Settle();
  EXPECT_TRUE(spawner.prepared.empty());
  EXPECT_EQ(spawner.spawned, 0);
}

TEST_F(AgentTest, RoundStartsOneWorkerPerLocalRankWithTheControlChannel) {
  StartFirstRound();
  ASSERT_EQ(spawner.children.size(), 2u);
  EXPECT_EQ(child(0).spec.program, "worker");
  EXPECT_TRUE(child(0).spec.env.count("FTRUN_CONTROL_SOCKET"));
  EXPECT_TRUE(MetricSays("ftrun_rounds_total 1"));
  EXPECT_TRUE(MetricSays("ftrun_workers_live 2"));
}

TEST_F(AgentTest, AllWorkersSucceedingIsReportedAndTheVerdictEndsTheJob) {
  StartFirstRound();
  child(0).Exit(0);
  Settle();
  EXPECT_EQ(log->succeeded, 0) << "one worker still runs";
  child(1).Exit(0);
  Settle();
  EXPECT_EQ(log->succeeded, 1);
  agent->OnJobFinished({true, {}, ""});
  Settle();
  ExpectFinished(0);
}

TEST_F(AgentTest, FailureStopsTheSurvivorsReportsStoppedAndTheNextRoundRestarts) {
  StartFirstRound();
  child(0).Exit(3);
  Settle();
  ASSERT_EQ(log->failures.size(), 1u);
  EXPECT_EQ(log->failures[0].exitcode, 3);
  EXPECT_EQ(log->failures[0].rank, 0);
  EXPECT_EQ(agent->state(), AgentState::kWaiting) << "the survivor died of SIGTERM";
  EXPECT_EQ(log->stopped, 1);
  EXPECT_TRUE(spawner.children.empty());
  StartRound(2, /*restart=*/1);
  EXPECT_TRUE(MetricSays("ftrun_restarts 1"));
  EXPECT_TRUE(MetricSays("ftrun_worker_failures_total 1"));
}

TEST_F(AgentTest, AWorkerThatIgnoresSigtermIsKilledWhenTheGraceIsOver) {
  StartFirstRound();
  child(1).ignores_sigterm = true;
  FailWorker(0);
  EXPECT_EQ(agent->state(), AgentState::kStopping);
  EXPECT_EQ(child(1).group_signals, (std::vector<int>{SIGTERM, SIGCONT}));
  AdvanceAndSettle(std::chrono::milliseconds(4999));
  EXPECT_EQ(child(1).group_signals, (std::vector<int>{SIGTERM, SIGCONT}))
      << "no SIGKILL before 5 s";
  AdvanceAndSettle(std::chrono::milliseconds(1));
  EXPECT_TRUE(spawner.children.empty());
  ExpectStoppedAndWaiting(1);
}

TEST_F(AgentTest, RestartRequestedStopsTheWorkersThenReportsStopped) {
  StartFirstRound();
  agent->OnRestartRequested("a node left");
  EXPECT_EQ(agent->state(), AgentState::kStopping);
  Settle();
  ExpectStoppedAndWaiting(1);
  EXPECT_TRUE(log->failures.empty());
}

TEST_F(AgentTest, RestartRequestedWithNoWorkersIsReportedAtOnce) {
  StartAgent();
  agent->OnRestartRequested("a node joined");
  EXPECT_EQ(log->stopped, 1);
  EXPECT_EQ(agent->state(), AgentState::kWaiting);
}

TEST_F(AgentTest, ScaleUpAndDownRestartTheWorkersWithTheNewWorld) {
  StartAgent();
  StartRound(1, 0, /*nodes=*/1);
  EXPECT_TRUE(MetricSays("ftrun_world_size 2"));
  agent->OnRestartRequested("a node joined");  // scale up: 2 nodes
  Settle();
  StartRound(2, 1, /*nodes=*/2, /*group_rank=*/1);
  EXPECT_TRUE(MetricSays("ftrun_world_size 4"));
  EXPECT_TRUE(MetricSays("ftrun_rendezvous_members 2"));
  agent->OnRestartRequested("a node left");  // scale down: back to one
  Settle();
  StartRound(3, 2, /*nodes=*/1);
  EXPECT_TRUE(MetricSays("ftrun_world_size 2"));
  EXPECT_EQ(log->stopped, 2);
}

TEST_F(AgentTest, RestartBudgetSpentStopsTheWorkersAndFailsWithTheSummary) {
  StartFirstRound();
  FailWorker(0);
  StartRound(2, 1);
  launcher::JobResult r{false, log->failures, "restarts exhausted (3/3)"};
  agent->OnJobFinished(r);
  EXPECT_EQ(agent->state(), AgentState::kStopping);
  Settle();
  ExpectFinished(1);
  EXPECT_EQ(planner->failure_reports, 1);
  EXPECT_GE(log->shutdowns, 1);
}

TEST_F(AgentTest, ForwardedSignalStopsTheWorkersWithItAndEndsTheJob) {
  config.signals = {SIGUSR2};
  signal_exit_code = [](int sig) { return 128 + sig; };
  StartFirstRound();
  child(0).ignores_sigterm = true;  // irrelevant: the signal sent is SIGUSR2
  ASSERT_EQ(::raise(SIGUSR2), 0);
  Settle();
  ExpectFinished(128 + SIGUSR2);
  EXPECT_GE(log->shutdowns, 1);
}

TEST_F(AgentTest, SecondSignalKillsWorkersThatIgnoreTheFirst) {
  config.signals = {SIGTERM};
  StartFirstRound();
  child(0).ignores_sigterm = true;
  child(1).ignores_sigterm = true;
  ASSERT_EQ(::raise(SIGTERM), 0);
  Settle();
  EXPECT_EQ(agent->state(), AgentState::kStopping);
  ASSERT_EQ(::raise(SIGTERM), 0);
  Settle();
  ExpectFinished(1);
}

TEST_F(AgentTest, AProgramThatCannotStartEndsTheJob) {
  spawner.missing.insert("worker");
  StartAgent();
  agent->OnRoundStarted(Round(1));
  Settle();
  ExpectFinished(1);
}

TEST_F(AgentTest, ASetUpErrorFinishesBeforeJoining) {
  watchdog_fifo = tmpdir + "/no/such/dir/watchdog";
  StartAgent(false);
  ExpectFinished(1);
  EXPECT_EQ(log->started, 0);
  EXPECT_EQ(spawner.spawned, 0);
}

TEST_F(AgentTest, AnExcludedNodeKillsItsWorkersAndExitsWithTempfail) {
  StartFirstRound();
  agent->OnExcluded("too slow");
  Settle();
  ExpectFinished(launcher::kExitExcluded);
  EXPECT_TRUE(spawner.children.empty());
}

TEST_F(AgentTest, MasterSilentTheWorkersRunOnAndItsNextOrderIsObeyed) {
  StartFirstRound();
  AdvanceAndSettle(std::chrono::minutes(10));  // no word from the rendezvous for 10 min
  EXPECT_EQ(agent->state(), AgentState::kRunning);
  EXPECT_TRUE(child(0).group_signals.empty());
  agent->OnRestartRequested("the master is back and restarts");
  Settle();
  EXPECT_EQ(log->stopped, 1);
  StartRound(2, 1);
}

TEST_F(AgentTest, MasterLostForGoodFailsTheJobAfterStoppingTheWorkers) {
  StartFirstRound();
  agent->OnJobFinished({false, {}, "lost contact with the rendezvous server"});
  Settle();
  ExpectFinished(1);
  EXPECT_TRUE(spawner.children.empty());
}

}  // namespace
}  // namespace ftrun::testing
