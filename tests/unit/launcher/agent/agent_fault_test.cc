// The agent's fault-time transitions: the save relay, holding the survivors for the save
// and its deadline, the survivors' grace (msrun TTP), and hang detection.
#include <algorithm>
#include <csignal>
#include <fstream>

#include "launcher/agent/save_relay.h"
#include "tests/unit/launcher/agent/agent_fixture.h"

namespace ftrun::testing {
namespace {

rendezvous::SaveOrder Collecting(uint64_t id) {
  rendezvous::SaveOrder o;
  o.id = id;
  o.collecting = true;
  return o;
}

TEST_F(AgentTest, SaveRelayReportsEveryLocalRanksProgress) {
  StartAgent();
  StartRound(1, 0, /*nodes=*/2, /*group_rank=*/1);
  agent->OnSaveOrder(1, Collecting(4));  // a rank of the other node failed
  ASSERT_EQ(log->progress.size(), 1u);
  ASSERT_EQ(log->progress[0].size(), 2u);
  EXPECT_EQ(log->progress[0][0].rank, 2);
  EXPECT_EQ(log->progress[0][1].rank, 3);
  EXPECT_TRUE(log->progress[0][1].healthy);
  EXPECT_FALSE(log->progress[0][0].has_handler) << "not connected";
  agent->OnSaveOrder(7, Collecting(5));  // another round: nothing of ours to report
  ASSERT_EQ(log->progress.size(), 2u);
  EXPECT_TRUE(log->progress[1].empty());
}

TEST_F(AgentTest, SaveRelayAnswersForARankThatIsNotConnected) {
  StartFirstRound();
  rendezvous::SaveOrder o;
  o.id = 5;
  o.step = 10;
  o.savers = {{1, "g"}, {7, "h"}};  // rank 7 is on another node
  agent->OnSaveOrder(1, o);
  ASSERT_EQ(log->saved.size(), 1u);
  EXPECT_EQ(log->saved[0].rank, 1);
  EXPECT_FALSE(log->saved[0].ok);
  EXPECT_EQ(log->saved[0].error, "rank 1 is not connected");
  agent->OnSaveOrder(/*round=*/9, o);  // an order for another round is not ours
  EXPECT_EQ(log->saved.size(), 1u);
}

TEST_F(AgentTest, FailureHoldsASurvivorThatCanSaveUntilTheStopOrder) {
  StartAgent();
  spawner.own_pgid_next = true;  // rank 0 may connect from this test
  StartRound(1);
  auto rank0 = ConnectRank(0, 7);
  FailWorker(1);
  EXPECT_EQ(agent->state(), AgentState::kHoldingForSave);
  EXPECT_TRUE(child(0).group_signals.empty()) << "the survivor waits for the save";
  rendezvous::SaveOrder o;
  o.id = 1;
  o.step = 7;
  o.savers = {{0, ""}};
  agent->OnSaveOrder(1, o);
  std::string order = rank0->Receive();
  EXPECT_NE(order.find(R"("type":"save")"), std::string::npos) << order;
  rank0->Send(R"({"type":"saved","id":1,"ok":true})");
  ASSERT_EQ(log->saved.size(), 1u);
  EXPECT_TRUE(log->saved[0].ok);
  EXPECT_TRUE(MetricSays(R"(ftrun_saves_total{outcome="saved"} 1)"));
  agent->OnRestartRequested("saved; restarting");
  Settle();
  ExpectStoppedAndWaiting(1);
}

// The records `ftrun report` splits a recovery by, in the order the boundaries are passed.
TEST_F(AgentTest, ARecoveryIsRecordedAtEachOfItsBoundaries) {
  auto opened = EventLog::Open(tmpdir + "/events.jsonl", "job", "node0");
  ASSERT_TRUE(opened) << opened.error().message;
  events = *opened;
  StartAgent();
  spawner.own_pgid_next = true;
  StartRound(1);
  auto rank0 = ConnectRank(0, 7);
  rank0->Send(R"({"type":"progress","step":7,"updating":false})");
  Settle();
  FailWorker(1);
  ASSERT_EQ(agent->state(), AgentState::kHoldingForSave);
  agent->OnRestartRequested("saved; restarting");
  Settle();
  ExpectStoppedAndWaiting(1);
  std::vector<std::string> names;
  std::string detected;
  std::ifstream in(tmpdir + "/events.jsonl");
  for (std::string l; std::getline(in, l);) {
    const auto at = l.find(R"("event":")");
    ASSERT_NE(at, std::string::npos) << l;
    names.push_back(l.substr(at + 9, l.find('"', at + 9) - at - 9));
    if (names.back() == "fault_detected") detected = l;
  }
  auto index = [&](const std::string& name) {
    return std::find(names.begin(), names.end(), name) - names.begin();
  };
  const auto n = static_cast<long>(names.size());
  ASSERT_LT(index("fault_detected"), n);
  EXPECT_LT(index("fault_detected"), index("fault_save_done"));
  EXPECT_LT(index("fault_save_done"), index("workers_stopping"));
  EXPECT_LT(index("workers_stopping"), index("workers_stopped"));
  EXPECT_LT(index("workers_stopped"), n);
  EXPECT_NE(detected.find(R"("kind":"exit")"), std::string::npos) << detected;
  EXPECT_NE(detected.find(R"("rank":1)"), std::string::npos) << detected;
  EXPECT_NE(detected.find(R"("step":7)"), std::string::npos) << detected;
}

TEST_F(AgentTest, HeldSurvivorsAreStoppedWhenNoStopOrderComes) {
  config.save_timeout = std::chrono::seconds(20);
  StartAgent();
  spawner.own_pgid_next = true;
  StartRound(1);
  auto rank0 = ConnectRank(0, 3);
  FailWorker(1);
  ASSERT_EQ(agent->state(), AgentState::kHoldingForSave);
  AdvanceAndSettle(std::chrono::seconds(29));
  EXPECT_EQ(agent->state(), AgentState::kHoldingForSave);
  AdvanceAndSettle(std::chrono::seconds(1));  // save timeout + 10 s
  ExpectStoppedAndWaiting(1);
}

TEST_F(AgentTest, SurvivorGraceLetsTheSurvivorsExitByThemselves) {
  config.survivor_grace = std::chrono::seconds(10);
  StartFirstRound();
  FailWorker(0);
  EXPECT_EQ(agent->state(), AgentState::kSurvivorGrace);
  EXPECT_TRUE(child(0).group_signals.empty());
  child(1).Exit(0);  // TTP saved and exited the survivor
  Settle();
  ExpectStoppedAndWaiting(1);
}

TEST_F(AgentTest, SurvivorGraceEndsWithTheStopSignal) {
  config.survivor_grace = std::chrono::seconds(10);
  StartFirstRound();
  FailWorker(0);
  AdvanceAndSettle(std::chrono::seconds(9));
  EXPECT_EQ(agent->state(), AgentState::kSurvivorGrace);
  AdvanceAndSettle(std::chrono::seconds(1));
  ExpectStoppedAndWaiting(1);
}

TEST_F(AgentTest, HungRankDumpsItsStacksAndBecomesAFailure) {
  auto rank0 = StartWatchedRound(42);
  AdvanceAndSettle(std::chrono::seconds(4));
  EXPECT_TRUE(child(0).signals.empty()) << "not silent long enough";
  AdvanceAndSettle(std::chrono::seconds(2));
  EXPECT_EQ(child(0).signals, std::vector<int>{launcher::WorkerChannels::StackDumpSignal()});
  // The fake child writes no stack: the collection waits for it until its deadline.
  AdvanceAndSettle(std::chrono::seconds(2));
  EXPECT_TRUE(log->failures.empty()) << "the stacks are gathered first";
  AdvanceAndSettle(std::chrono::seconds(1));
  ASSERT_EQ(log->failures.size(), 1u);
  EXPECT_NE(log->failures[0].message.find("no Python stack from any of the 2 rank(s)"),
            std::string::npos)
      << log->failures[0].message;
  EXPECT_EQ(log->failures[0].exitcode, 124);
  EXPECT_NE(log->failures[0].message.find("after step 42"), std::string::npos);
  // The hung rank is alive and can save: it is held for the fault-time save.
  EXPECT_EQ(agent->state(), AgentState::kHoldingForSave);
  AdvanceAndSettle(std::chrono::seconds(10));
  EXPECT_EQ(child(0).signals.size(), 1u) << "a rank is declared hung once per attempt";
}

TEST_F(AgentTest, NoHangVerdictAfterTheRoundStopped) {
  auto rank0 = StartWatchedRound(1);
  AdvanceAndSettle(std::chrono::seconds(6));  // stacks asked for; the verdict waits for them
  agent->OnRestartRequested("another node failed");
  Settle();
  AdvanceAndSettle(std::chrono::seconds(4));
  EXPECT_TRUE(log->failures.empty());
  EXPECT_EQ(agent->state(), AgentState::kWaiting);
}

TEST_F(AgentTest, HangWatchEndsWithTheGroupWhenEveryWorkerSucceeds) {
  auto rank0 = StartWatchedRound(3);
  child(0).Exit(0);
  child(1).Exit(0);
  Settle();
  EXPECT_EQ(log->succeeded, 1);
  // The verdict is the coordinator's and may be late: nothing may still read the group,
  // which is gone (a multi-node agent once crashed here on the hang detector's next check).
  EXPECT_EQ(clock.pending(), 0u) << "a timer still watches the exited group";
  AdvanceAndSettle(std::chrono::seconds(10));
  EXPECT_TRUE(log->failures.empty());
}

}  // namespace
}  // namespace ftrun::testing
