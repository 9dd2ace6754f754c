// The network check as the rendezvous state machine runs it: the session's waves and orders,
// and the checking phase between a formed round and its workers (fake clock).
#include "rendezvous/network_check_session.h"

#include <gtest/gtest.h>

#include "rendezvous/rendezvous_state.h"

namespace ftrun::rendezvous {
namespace {

using std::chrono::seconds;

NodeInfo Node(const std::string& id) {
  NodeInfo n;
  n.node_id = id;
  n.addr = id + ".addr";
  n.host = id + ".host";
  n.nproc_per_node = 1;
  n.free_port = 2000 + id[1];
  n.probe_port = 3000 + id[1];
  return n;
}

std::vector<NodeInfo> Nodes(const std::vector<std::string>& ids) {
  std::vector<NodeInfo> nodes;
  for (const auto& id : ids) nodes.push_back(Node(id));
  return nodes;
}

CheckSettings Settings() {
  CheckSettings s;
  s.enabled = true;
  s.bytes = 1000;
  s.pair_timeout = seconds(10);
  return s;
}

// Every client of the current wave reports: ok at `mbps`, except pairs touching `bad`.
bool ReportWave(NetworkCheckSession& s, const std::vector<std::string>& ids,
                const std::set<std::string>& bad, TimePoint now, double mbps = 1000) {
  bool moved = false;
  for (const auto& id : ids) {
    auto o = s.OrderFor(id);
    if (!o) continue;
    std::vector<CheckTaskResult> results;
    for (const auto& t : o->tasks) {
      if (!t.client) continue;
      CheckTaskResult r;
      r.index = t.index;
      r.probed = true;
      r.probe_ok = !bad.count(id) && !bad.count(t.peer);
      r.reason = r.probe_ok ? "" : "timed out talking to " + t.peer_host;
      r.mbps_ab = r.mbps_ba = r.probe_ok ? mbps : 0;
      results.push_back(r);
    }
    if (!results.empty()) moved = s.Report(id, o->id, results, now) || moved;
  }
  return moved;
}

TEST(NetworkCheckSession, OrdersNameTheListenersProbe) {
  TimePoint now{};
  NetworkCheckSession s({Node("n0"), Node("n1")}, Settings(), 7, now);
  auto a = s.OrderFor("n0");
  auto b = s.OrderFor("n1");
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->id, 7u);
  EXPECT_EQ(a->bytes, 1000u);
  ASSERT_EQ(a->tasks.size(), 1u);
  EXPECT_FALSE(a->tasks[0].client);
  ASSERT_EQ(b->tasks.size(), 1u);
  const CheckTask& t = b->tasks[0];
  EXPECT_TRUE(t.client);
  EXPECT_EQ(t.peer, "n0");
  EXPECT_EQ(t.peer_addr, "n0.addr");
  EXPECT_EQ(t.peer_port, 3000 + '0');
  EXPECT_EQ(t.master_port, 2000 + '0');
  EXPECT_FALSE(s.OrderFor("stranger"));
}

// Every member's order carries the session's probe key, the listener's as the client's.
TEST(NetworkCheckSession, OrdersCarryTheSessionsProbeKey) {
  const std::string key = "0123456789abcdef0123456789abcdef";
  NetworkCheckSession s({Node("n0"), Node("n1"), Node("n2")}, Settings(), 1, TimePoint{}, key);
  for (const auto& id : {"n0", "n1", "n2"}) {
    auto o = s.OrderFor(id);
    ASSERT_TRUE(o) << id;
    EXPECT_EQ(o->probe_key, key) << id;
  }
}

TEST(NetworkCheckSession, AllHealthyIsDoneAfterOneRound) {
  TimePoint now{};
  std::vector<std::string> ids = {"n0", "n1", "n2", "n3"};
  NetworkCheckSession s(Nodes(ids), Settings(), 1, now);
  EXPECT_TRUE(ReportWave(s, ids, {}, now));
  ASSERT_TRUE(s.done());
  EXPECT_TRUE(s.report().Faulty().empty());
  EXPECT_EQ(s.report().pairs.size(), 2u);
  EXPECT_FALSE(s.OrderFor("n0"));
}

TEST(NetworkCheckSession, StaleOrWrongReportsAreIgnored) {
  TimePoint now{};
  NetworkCheckSession s({Node("n0"), Node("n1")}, Settings(), 5, now);
  CheckTaskResult r;
  r.index = 0;
  r.probed = true;
  r.probe_ok = true;
  EXPECT_FALSE(s.Report("n1", 4, {r}, now));  // an older order
  EXPECT_FALSE(s.Report("n0", 5, {r}, now));  // the listener cannot report the probe
  EXPECT_FALSE(s.Report("n9", 5, {r}, now));  // a stranger
  r.index = 42;
  EXPECT_FALSE(s.Report("n1", 5, {r}, now));  // no such pair
  EXPECT_FALSE(s.done());
}

TEST(NetworkCheckSession, ABrokenNodeIsFoundInRoundOne) {
  TimePoint now{};
  std::vector<std::string> ids = {"n0", "n1", "n2", "n3"};
  NetworkCheckSession s(Nodes(ids), Settings(), 1, now);
  ReportWave(s, ids, {"n1"}, now);
  ASSERT_FALSE(s.done());
  auto o = s.OrderFor("n1");
  ASSERT_TRUE(o);
  EXPECT_EQ(o->round, 1);
  ReportWave(s, ids, {"n1"}, now);
  ASSERT_TRUE(s.done());
  EXPECT_EQ(s.report().Faulty(), std::vector<std::string>{"n1"});
}

TEST(NetworkCheckSession, MissingResultsFailAtTheDeadline) {
  TimePoint now{};
  NetworkCheckSession s({Node("n0"), Node("n1"), Node("n2"), Node("n3")}, Settings(), 1, now);
  // n3 never reports (its pair n2-n3 fails); the others do.
  ReportWave(s, {"n1"}, {}, now);
  EXPECT_FALSE(s.Tick(now + seconds(14)));
  EXPECT_TRUE(s.Tick(now + seconds(16)));                        // 10 s probe + 5 s slack
  ASSERT_FALSE(s.done());                                        // round 1 re-tests n2 and n3
  ReportWave(s, {"n0", "n1", "n2"}, {"n3"}, now + seconds(16));  // n3 is still dead
  s.Tick(now + seconds(40));
  ASSERT_TRUE(s.done());
  EXPECT_EQ(s.report().Faulty(), std::vector<std::string>{"n3"});
  bool named = false;
  for (const auto& p : s.report().pairs) {
    named = named || p.reason.find("no result from n3.host") != std::string::npos;
  }
  EXPECT_TRUE(named);
}

TEST(NetworkCheckSession, TheCommandMustSucceedOnBothSides) {
  TimePoint now{};
  CheckSettings settings = Settings();
  settings.run_command = true;
  NetworkCheckSession s({Node("n0"), Node("n1")}, settings, 1, now);
  auto a = s.OrderFor("n0");
  ASSERT_TRUE(a && a->run_command);
  CheckTaskResult probe;
  probe.index = 0;
  probe.probed = true;
  probe.probe_ok = true;
  probe.mbps_ab = probe.mbps_ba = 500;
  probe.ran_command = true;
  probe.command_ok = true;
  EXPECT_FALSE(s.Report("n1", a->id, {probe}, now));  // n0's command is still missing
  CheckTaskResult cmd;
  cmd.index = 0;
  cmd.ran_command = true;
  cmd.command_ok = false;
  cmd.command_reason = "exit code 1 after 2.5s";
  EXPECT_TRUE(s.Report("n0", a->id, {cmd}, now));
  ASSERT_TRUE(s.done());
  ASSERT_FALSE(s.report().pairs.empty());
  EXPECT_FALSE(s.report().pairs[0].ok);
  EXPECT_NE(s.report().pairs[0].reason.find("check command on n0.host: exit code 1"),
            std::string::npos);
}

class CheckingPhaseTest : public ::testing::Test {
 protected:
  void Make(int min, int max, bool exclude_stragglers = false, int max_restarts = 0) {
    JobSpec spec;
    spec.run_id = "job";
    spec.max_restarts = max_restarts;
    spec.min_nodes = min;
    spec.max_nodes = max;
    spec.last_call_timeout = seconds(1);
    spec.fault_save = false;
    spec.check = Settings();
    spec.check.exclude_stragglers = exclude_stragglers;
    state_.emplace(spec, now_);
  }
  void JoinAll(const std::vector<std::string>& ids) {
    for (const auto& id : ids) {
      auto refused = state_->Join(Node(id), now_);
      ASSERT_FALSE(refused) << refused->message;
    }
    now_ += seconds(2);
    for (const auto& id : ids) state_->Seen(id, now_);
    state_->Tick(now_);
  }
  // Every client answers its current order; pairs touching `bad` fail, `slow` is 10 MB/s.
  void AnswerOrders(const std::vector<std::string>& ids, const std::set<std::string>& bad,
                    const std::set<std::string>& slow = {}) {
    for (const auto& id : ids) {
      NodeView v = state_->View(id);
      if (!v.check) continue;
      std::vector<CheckTaskResult> results;
      for (const auto& t : v.check->tasks) {
        if (!t.client) continue;
        CheckTaskResult r;
        r.index = t.index;
        r.probed = true;
        r.probe_ok = !bad.count(id) && !bad.count(t.peer);
        const bool is_slow = slow.count(id) || slow.count(t.peer);
        r.mbps_ab = r.mbps_ba = r.probe_ok ? (is_slow ? 10 : 1000) : 0;
        if (!r.probe_ok) r.reason = "connection refused by " + t.peer_host;
        results.push_back(r);
      }
      state_->ReportCheck(id, v.round, v.check->id, results, now_);
    }
  }
  TimePoint now_{};
  std::optional<RendezvousState> state_;
};

TEST_F(CheckingPhaseTest, ARoundIsCheckedBeforeItRuns) {
  Make(2, 4);
  std::vector<std::string> ids = {"n0", "n1", "n2", "n3"};
  JoinAll(ids);
  ASSERT_EQ(state_->phase(), Phase::kChecking);
  EXPECT_TRUE(state_->View("n0").member);
  AnswerOrders(ids, {});
  EXPECT_EQ(state_->phase(), Phase::kRunning);
  NodeView v = state_->View("n2");
  EXPECT_EQ(v.check_id, 1u);
  EXPECT_FALSE(v.check_table.empty());
  EXPECT_NE(v.check_json.find("\"network_check\""), std::string::npos);
  EXPECT_TRUE(v.excluded.empty());
}

TEST_F(CheckingPhaseTest, AFaultyNodeIsExcludedAndTheOthersRun) {
  Make(2, 4);
  std::vector<std::string> ids = {"n0", "n1", "n2", "n3"};
  JoinAll(ids);
  const uint64_t round = state_->round();
  AnswerOrders(ids, {"n2"});  // round 0
  AnswerOrders(ids, {"n2"});  // round 1
  ASSERT_EQ(state_->phase(), Phase::kRunning);
  EXPECT_GT(state_->round(), round);
  EXPECT_NE(state_->View("n2").excluded.find("faulty"), std::string::npos);
  EXPECT_FALSE(state_->View("n2").member);
  EXPECT_EQ(state_->View("n0").assignment.group_world_size, 3);
  EXPECT_TRUE(state_->View("n3").excluded.empty());  // its partner is not blamed
  // The excluded node cannot come back under the same id.
  auto refused = state_->Join(Node("n2"), now_);
  ASSERT_TRUE(refused);
  EXPECT_NE(refused->message.find("excluded"), std::string::npos);
}

TEST_F(CheckingPhaseTest, TooFewNodesLeftFailsTheJobNamingTheFaultyOne) {
  Make(4, 4);
  std::vector<std::string> ids = {"n0", "n1", "n2", "n3"};
  JoinAll(ids);
  AnswerOrders(ids, {"n1"});
  AnswerOrders(ids, {"n1"});
  ASSERT_EQ(state_->phase(), Phase::kFailed);
  const std::string reason = state_->View("n0").reason;
  EXPECT_NE(reason.find("n1.host"), std::string::npos) << reason;
  EXPECT_NE(reason.find("3 node(s) left"), std::string::npos) << reason;
}

TEST_F(CheckingPhaseTest, StragglersAreExcludedOnlyWhenAsked) {
  for (bool exclude : {false, true}) {
    Make(2, 4, exclude);
    std::vector<std::string> ids = {"n0", "n1", "n2", "n3"};
    JoinAll(ids);
    AnswerOrders(ids, {}, {"n3"});  // round 0: n2-n3 slow
    AnswerOrders(ids, {}, {"n3"});  // round 1: n3 slow again, n2 fast
    ASSERT_EQ(state_->phase(), Phase::kRunning) << exclude;
    EXPECT_EQ(!state_->View("n3").excluded.empty(), exclude);
    EXPECT_TRUE(state_->View("n2").excluded.empty());
    EXPECT_EQ(state_->View("n0").assignment.group_world_size, exclude ? 3 : 4);
  }
}

TEST_F(CheckingPhaseTest, NoHealthyReferenceFailsTheJob) {
  Make(1, 2);
  JoinAll({"n0", "n1"});
  AnswerOrders({"n0", "n1"}, {"n1"});
  AnswerOrders({"n0", "n1"}, {"n1"});
  ASSERT_EQ(state_->phase(), Phase::kFailed);
  EXPECT_NE(state_->View("n0").reason.find("could not isolate"), std::string::npos);
}

TEST_F(CheckingPhaseTest, ARestartOfCheckedNodesRunsAtOnce) {
  Make(2, 3, false, /*max_restarts=*/1);
  JoinAll({"n0", "n1"});
  AnswerOrders({"n0", "n1"}, {});
  ASSERT_EQ(state_->phase(), Phase::kRunning);
  WorkerFailure f;
  f.host = "n0.host";
  state_->ReportFailed("n0", state_->round(), {f}, now_);
  ASSERT_EQ(state_->phase(), Phase::kStopping);
  for (const auto& id : {"n0", "n1"}) state_->ReportStopped(id, state_->round(), 0, now_);
  EXPECT_EQ(state_->phase(), Phase::kRunning);  // no second check
  EXPECT_EQ(state_->View("n0").check_id, 1u);
}

TEST_F(CheckingPhaseTest, ANewNodeBringsANewCheck) {
  Make(2, 3);
  JoinAll({"n0", "n1"});
  ASSERT_TRUE(state_->View("n0").check && state_->View("n1").check);
  const std::string first_key = state_->View("n0").check->probe_key;
  EXPECT_EQ(state_->View("n1").check->probe_key, first_key);
  EXPECT_FALSE(state_->View("").check) << "a stranger (Status) sees no order and no key";
  AnswerOrders({"n0", "n1"}, {});
  ASSERT_EQ(state_->phase(), Phase::kRunning);
  ASSERT_FALSE(state_->Join(Node("n2"), now_));  // scaling up stops the round
  ASSERT_EQ(state_->phase(), Phase::kStopping);
  for (const auto& id : {"n0", "n1"}) state_->ReportStopped(id, state_->round(), 0, now_);
  ASSERT_EQ(state_->phase(), Phase::kChecking);
  AnswerOrders({"n0", "n1", "n2"}, {});
  const std::string second_key = state_->View("n2").check->probe_key;
  AnswerOrders({"n0", "n1", "n2"}, {});
  AnswerOrders({"n0", "n1", "n2"}, {});  // the odd node's second wave
  EXPECT_EQ(state_->phase(), Phase::kRunning);
  EXPECT_EQ(state_->View("n0").check_id, 2u);
  // Each check has its own key (128 random bits), the same for all its members.
  EXPECT_EQ(first_key.size(), 32u);
  EXPECT_EQ(second_key.size(), 32u);
  EXPECT_NE(first_key, second_key);
}

TEST_F(CheckingPhaseTest, AnAgentWithoutAProbeIsRefused) {
  Make(2, 2);
  NodeInfo n = Node("n0");
  n.probe_port = 0;
  auto refused = state_->Join(n, now_);
  ASSERT_TRUE(refused);
  EXPECT_NE(refused->message.find("--network-check"), std::string::npos);
}

TEST_F(CheckingPhaseTest, ALostMemberReformsTheRoundAndChecksAgain) {
  Make(2, 4);
  JoinAll({"n0", "n1", "n2"});
  ASSERT_EQ(state_->phase(), Phase::kChecking);
  state_->Leave("n2", now_);
  ASSERT_EQ(state_->phase(), Phase::kChecking);  // re-formed with n0, n1, checked again
  AnswerOrders({"n0", "n1"}, {});
  EXPECT_EQ(state_->phase(), Phase::kRunning);
  EXPECT_EQ(state_->View("n0").assignment.group_world_size, 2);
}

// A spare promoted into a lost node's place is checked with the survivor: two nodes alone
// cannot say whose end of the pair is broken, but the survivor passed an earlier check, so
// the spare is the faulty one and is not promoted; the next spare takes the place.
TEST_F(CheckingPhaseTest, ASpareFailingTheCheckIsNotPromotedAndTheNextSpareIs) {
  Make(2, 2);
  JoinAll({"n0", "n1"});
  AnswerOrders({"n0", "n1"}, {});
  ASSERT_EQ(state_->phase(), Phase::kRunning);
  for (const auto& id : {"n2", "n3"}) ASSERT_FALSE(state_->Join(Node(id), now_));
  EXPECT_FALSE(state_->View("n2").member);  // spares beyond MAX
  state_->Leave("n1", now_);
  for (const auto& id : {"n0"}) state_->ReportStopped(id, state_->round(), 0, now_);
  ASSERT_EQ(state_->phase(), Phase::kChecking);
  EXPECT_TRUE(state_->View("n2").member);
  AnswerOrders({"n0", "n2"}, {"n2"});
  AnswerOrders({"n0", "n2"}, {"n2"});
  EXPECT_NE(state_->View("n2").excluded.find("n0.host passed an earlier check"), std::string::npos)
      << state_->View("n2").excluded;
  EXPECT_TRUE(state_->View("n0").excluded.empty());
  ASSERT_EQ(state_->phase(), Phase::kChecking);  // now the next spare
  EXPECT_TRUE(state_->View("n3").member);
  AnswerOrders({"n0", "n3"}, {});
  ASSERT_EQ(state_->phase(), Phase::kRunning);
  EXPECT_EQ(state_->View("n3").assignment.group_rank, 1);  // the lost node's place
  EXPECT_EQ(state_->View("n0").restart_count, 0);
}

// Without a spare left the round goes on at MIN without it.
TEST_F(CheckingPhaseTest, AFailingSpareLeavesTheRoundToMin) {
  Make(1, 2);
  JoinAll({"n0", "n1"});
  AnswerOrders({"n0", "n1"}, {});
  ASSERT_FALSE(state_->Join(Node("n2"), now_));
  state_->Leave("n1", now_);
  state_->ReportStopped("n0", state_->round(), 0, now_);
  ASSERT_EQ(state_->phase(), Phase::kChecking);
  AnswerOrders({"n0", "n2"}, {"n2"});
  AnswerOrders({"n0", "n2"}, {"n2"});
  EXPECT_FALSE(state_->View("n2").excluded.empty());
  ASSERT_EQ(state_->phase(), Phase::kRunning);
  EXPECT_EQ(state_->View("n0").assignment.group_world_size, 1);
}

}  // namespace
}  // namespace ftrun::rendezvous
