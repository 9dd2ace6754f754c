// Faults around spare nodes, with real agents on loopback and fake workers: a spare that dies
// while it waits, a spare lost during its promotion, two nodes lost at once, and a spare that
// fails the pre-flight network check. A node loss is a membership change: every test runs
// with --max-restarts 0, so a restart spent by mistake fails the job.
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <memory>

#include "tests/integration/netcheck_fixture.h"

namespace ftrun::testing {
namespace {

using namespace std::chrono_literals;

// The NetCheck fixture's agents (event log, records, fast keep-alive); most tests here run
// without the check.
class SpareFaults : public NetCheck {
 protected:
  // An agent of a dynamic job of `nnodes` whose workers record themselves (their role says
  // which agent they belong to) and wait for dir_/done.
  std::unique_ptr<ChildRun> Agent(const std::string& nnodes, const std::string& role,
                                  std::vector<std::string> options = {},
                                  std::map<std::string, std::string> env = {}) {
    auto argv = AgentArgs(dir_, nnodes, "127.0.0.1:" + port_, "job", kFastConf);
    argv.insert(argv.end(), {"--role", role, "--max-restarts", "0"});
    argv.insert(argv.end(), options.begin(), options.end());
    argv.insert(argv.end(), {"--no-python", FakeWorkerBinary(), "record", dir_ / "records",
                             "wait-file", dir_ / "done"});
    return std::make_unique<ChildRun>(FtrunBinary(), argv, env);
  }
  bool Joined(ChildRun& a) {
    return WaitFor([&] { return a.Err().find("joined the job") != std::string::npos; }, 20s);
  }
  bool WaitsAsSpare(ChildRun& a) {
    return WaitFor([&] { return a.Err().find("waiting as a spare") != std::string::npos; }, 20s);
  }
  // The STATE column of `ftrun status`: how many nodes it shows as spares.
  int SparesInStatus() {
    auto st = RunFtrun({"status", "127.0.0.1:" + port_}, {}, 10s);
    int n = 0;
    for (const auto& l : Lines(st.out)) n += l.find(" spare ") != std::string::npos;
    return n;
  }
  void Done() { std::ofstream(dir_ / "done") << ""; }
  // The node id an agent logs when it joins ("joined the job at ... node_id=<id> ...").
  static std::string NodeIdOf(const std::string& log) {
    const std::string key = "node_id=";
    const size_t at = log.find(key);
    if (at == std::string::npos) return "";
    const size_t begin = at + key.size();
    return log.substr(begin, log.find(' ', begin) - begin);
  }
};

TEST_F(SpareFaults, ASpareThatDiesWhileWaitingLeavesTheJobUnharmed) {
  auto a = Agent("2", "a");
  ASSERT_TRUE(Joined(*a)) << a->Err();
  auto b = Agent("2", "b");
  ASSERT_TRUE(WaitFor([&] { return Count("world=4") == 4; }, 20s)) << a->Err() << b->Err();
  auto s = Agent("2", "s");
  ASSERT_TRUE(WaitsAsSpare(*s)) << s->Err();
  ASSERT_TRUE(WaitFor([&] { return SparesInStatus() == 1; }, 10s));
  s->Signal(SIGKILL);
  s->Wait(10s);
  EXPECT_TRUE(WaitFor([&] { return SparesInStatus() == 0; }, 10s)) << "status still lists it";
  EXPECT_TRUE(WaitFor([&] { return a->Err().find("node_lost") != std::string::npos; }, 10s));
  Done();
  auto ra = a->Wait(30s), rb = b->Wait(30s);
  EXPECT_EQ(ra.exit_code, 0) << ra.err;
  EXPECT_EQ(rb.exit_code, 0) << rb.err;
  EXPECT_EQ(Lines(ReadFile(dir_ / "records")).size(), 4u) << "the round was never stopped";
  EXPECT_EQ(ra.err.find("round stopping"), std::string::npos) << ra.err;
}

// The first spare is SIGKILLed as soon as its promotion round starts: the round loses a member
// again, the second spare takes the place, and no restart is spent on either loss.
TEST_F(SpareFaults, ASpareLostDuringItsPromotionIsReplacedByTheNextSpare) {
  auto a = Agent("2", "a");
  ASSERT_TRUE(Joined(*a)) << a->Err();
  auto b = Agent("2", "b");
  ASSERT_TRUE(WaitFor([&] { return Count("world=4") == 4; }, 20s)) << a->Err() << b->Err();
  auto s1 = Agent("2", "s1");
  ASSERT_TRUE(WaitsAsSpare(*s1)) << s1->Err();
  auto s2 = Agent("2", "s2");
  ASSERT_TRUE(WaitsAsSpare(*s2)) << s2->Err();
  b->Signal(SIGKILL);
  b->Wait(10s);
  ASSERT_TRUE(WaitFor([&] { return s1->Err().find("round started") != std::string::npos; }, 20s))
      << s1->Err();
  s1->Signal(SIGKILL);
  s1->Wait(10s);
  ASSERT_TRUE(WaitFor([&] { return Count("role=s2") == 2; }, 20s)) << a->Err() << s2->Err();
  Done();
  auto ra = a->Wait(30s), rs2 = s2->Wait(30s);
  EXPECT_EQ(ra.exit_code, 0) << ra.err;
  EXPECT_EQ(rs2.exit_code, 0) << rs2.err;
  // No restart was spent on either loss, and s2 holds the lost node's group rank.
  const std::string rec = ReadFile(dir_ / "records");
  EXPECT_EQ(Count("attempt=0"), static_cast<int>(Lines(rec).size())) << rec;
  int s2_group1 = 0;
  for (const auto& l : Lines(rec)) {
    s2_group1 += l.find("group=1") != std::string::npos && l.find("role=s2") != std::string::npos;
  }
  EXPECT_EQ(s2_group1, 2) << rec;
  EXPECT_NE(s1->Err().find("round started"), std::string::npos);
}

// Without a second spare, the round goes on below MAX (--nnodes 1:2) without the lost spare.
TEST_F(SpareFaults, ASpareLostDuringItsPromotionLeavesTheRoundAtMin) {
  auto a = Agent("1:2", "a");
  ASSERT_TRUE(Joined(*a)) << a->Err();
  auto b = Agent("1:2", "b");
  ASSERT_TRUE(WaitFor([&] { return Count("world=4") == 4; }, 20s)) << a->Err() << b->Err();
  auto s = Agent("1:2", "s");
  ASSERT_TRUE(WaitsAsSpare(*s)) << s->Err();
  b->Signal(SIGKILL);
  b->Wait(10s);
  ASSERT_TRUE(WaitFor([&] { return s->Err().find("round started") != std::string::npos; }, 20s))
      << s->Err();
  s->Signal(SIGKILL);
  s->Wait(10s);
  ASSERT_TRUE(WaitFor([&] { return Count("role=a") >= 2 && Count("world=2") == 2; }, 20s))
      << a->Err();
  Done();
  auto ra = a->Wait(30s);
  EXPECT_EQ(ra.exit_code, 0) << ra.err;
  EXPECT_EQ(Count("attempt=0"), static_cast<int>(Lines(ReadFile(dir_ / "records")).size()))
      << ReadFile(dir_ / "records");
}

// Two training nodes lost at once: both spares are promoted into their places (group ranks 1
// and 2), in one membership change.
TEST_F(SpareFaults, TwoNodesLostAtOnceAreReplacedByTwoSpares) {
  std::vector<std::unique_ptr<ChildRun>> agents;
  for (const char* role : {"a", "b", "c"}) {
    agents.push_back(Agent("3", role));
    ASSERT_TRUE(Joined(*agents.back())) << agents.back()->Err();
  }
  ASSERT_TRUE(WaitFor([&] { return Count("world=6") == 6; }, 20s)) << agents[0]->Err();
  auto s1 = Agent("3", "s1");
  ASSERT_TRUE(WaitsAsSpare(*s1)) << s1->Err();
  auto s2 = Agent("3", "s2");
  ASSERT_TRUE(WaitsAsSpare(*s2)) << s2->Err();
  agents[1]->Signal(SIGKILL);
  agents[2]->Signal(SIGKILL);
  agents[1]->Wait(10s);
  agents[2]->Wait(10s);
  ASSERT_TRUE(WaitFor([&] { return Count("role=s1") == 2 && Count("role=s2") == 2; }, 20s))
      << agents[0]->Err() << s1->Err() << s2->Err();
  Done();
  auto ra = agents[0]->Wait(30s), r1 = s1->Wait(30s), r2 = s2->Wait(30s);
  EXPECT_EQ(ra.exit_code, 0) << ra.err;
  EXPECT_EQ(r1.exit_code, 0) << r1.err;
  EXPECT_EQ(r2.exit_code, 0) << r2.err;
  const std::string rec = ReadFile(dir_ / "records");
  EXPECT_EQ(Count("attempt=0"), Count("world=6")) << rec;
  // The survivor kept group rank 0, the spares took the lost nodes' places in joining order.
  int a_group0 = 0, s1_group1 = 0, s2_group2 = 0;
  for (const auto& l : Lines(rec)) {
    a_group0 += l.find("group=0") != std::string::npos && l.find("role=a") != std::string::npos;
    s1_group1 += l.find("group=1") != std::string::npos && l.find("role=s1") != std::string::npos;
    s2_group2 += l.find("group=2") != std::string::npos && l.find("role=s2") != std::string::npos;
  }
  EXPECT_EQ(a_group0, 4) << rec;
  EXPECT_EQ(s1_group1, 2) << rec;
  EXPECT_EQ(s2_group2, 2) << rec;
}

// --network-check: the spare promoted into the lost node's place fails the check against the
// survivor, which passed an earlier check: it is excluded (exit 75) before any worker starts,
// and the next spare takes the place.
TEST_F(SpareFaults, ASpareFailingTheNetworkCheckIsNotPromoted) {
  const std::vector<std::string> check = {"--network-check-cmd", "test -z \"$FAIL_CHECK\"",
                                          "--network-check-bytes", "1MiB"};
  auto a = Agent("2", "a", check);
  ASSERT_TRUE(Joined(*a)) << a->Err();
  auto b = Agent("2", "b", check);
  ASSERT_TRUE(WaitFor([&] { return Count("world=4") == 4; }, 30s)) << a->Err() << b->Err();
  auto bad = Agent("2", "bad", check, {{"FAIL_CHECK", "1"}});
  ASSERT_TRUE(WaitsAsSpare(*bad)) << bad->Err();
  auto good = Agent("2", "good", check);
  ASSERT_TRUE(WaitsAsSpare(*good)) << good->Err();
  b->Signal(SIGKILL);
  b->Wait(10s);
  auto rbad = bad->Wait(30s);
  EXPECT_EQ(rbad.exit_code, 75) << rbad.err;
  EXPECT_NE(rbad.err.find("this node leaves the job: the network check found it faulty"),
            std::string::npos)
      << rbad.err;
  EXPECT_NE(rbad.err.find("passed an earlier check"), std::string::npos) << rbad.err;
  ASSERT_TRUE(WaitFor([&] { return Count("role=good") == 2; }, 30s)) << a->Err() << good->Err();
  Done();
  auto ra = a->Wait(30s), rg = good->Wait(30s);
  EXPECT_EQ(ra.exit_code, 0) << ra.err;
  EXPECT_EQ(rg.exit_code, 0) << rg.err;
  EXPECT_EQ(Count("role=bad"), 0) << "no worker started on the faulty spare";
  EXPECT_EQ(Count("attempt=0"), Count("world=4"));
  int excluded = 0;
  for (const auto& e : Events("node_excluded")) excluded += Str(e, "member") == NodeIdOf(rbad.err);
  EXPECT_EQ(excluded, 1) << ReadFile(dir_ / "events");
}

// --network-check without a command: the spare is checked while it waits, paired with a member
// whose workers run on undisturbed, so the round that promotes it forms without another check.
TEST_F(SpareFaults, ASpareCheckedWhileItWaitsIsPromotedWithoutAnotherCheck) {
  const std::vector<std::string> check = {"--network-check", "--network-check-bytes", "1MiB"};
  // The checks the rendezvous (hosted by a) started: "network check round=<r> nodes=<n>".
  auto checks_started = [](const std::string& log) {
    int n = 0;
    for (const auto& l : Lines(log)) {
      n += l.find("network check round=") != std::string::npos &&
           l.find(" nodes=") != std::string::npos;
    }
    return n;
  };
  auto a = Agent("2", "a", check);
  ASSERT_TRUE(Joined(*a)) << a->Err();
  auto b = Agent("2", "b", check);
  ASSERT_TRUE(WaitFor([&] { return Count("world=4") == 4; }, 30s)) << a->Err() << b->Err();
  auto s = Agent("2", "s", check);
  ASSERT_TRUE(WaitsAsSpare(*s)) << s->Err();
  ASSERT_TRUE(WaitFor([&] { return CountLines(a->Err(), "network check finished") == 2; }, 30s))
      << a->Err();
  EXPECT_EQ(CountLines(a->Err(), "waiting nodes passed"), 1) << a->Err();
  EXPECT_EQ(checks_started(a->Err()), 2) << a->Err();
  EXPECT_EQ(Lines(ReadFile(dir_ / "records")).size(), 4u) << "the round was stopped";
  b->Signal(SIGKILL);
  b->Wait(10s);
  ASSERT_TRUE(WaitFor([&] { return Count("role=s") == 2; }, 30s)) << a->Err() << s->Err();
  EXPECT_EQ(checks_started(a->Err()), 2) << "the promotion checked the spare again: " << a->Err();
  Done();
  auto ra = a->Wait(30s), rs = s->Wait(30s);
  EXPECT_EQ(ra.exit_code, 0) << ra.err;
  EXPECT_EQ(rs.exit_code, 0) << rs.err;
}

}  // namespace
}  // namespace ftrun::testing
