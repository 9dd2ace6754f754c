#include "rendezvous/network_check_plan.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

namespace ftrun::rendezvous {
namespace {

std::vector<std::string> Nodes(int n) {
  std::vector<std::string> v;
  for (int i = 0; i < n; ++i) v.push_back("n" + std::to_string(i));
  return v;
}

PairResult Ok(const CheckPair& p, double mbps, double rtt = 0.05) {
  return PairResult{p, true, "", mbps, mbps, rtt};
}
PairResult Fail(const CheckPair& p, const std::string& why) {
  return PairResult{p, false, why, 0, 0, 0};
}

// Results for a plan: a pair fails when it touches a node in `broken`; otherwise its
// bandwidth is the smaller of the two nodes' speeds (default 1000).
std::vector<PairResult> Measure(const std::vector<CheckPair>& plan,
                                const std::set<std::string>& broken,
                                const std::map<std::string, double>& speed = {}) {
  std::vector<PairResult> out;
  auto sp = [&](const std::string& n) { return speed.count(n) ? speed.at(n) : 1000.0; };
  for (const auto& p : plan) {
    if (broken.count(p.a) || broken.count(p.b)) {
      out.push_back(Fail(p, "connection to " + (broken.count(p.a) ? p.a : p.b) + " timed out"));
    } else {
      out.push_back(Ok(p, std::min(sp(p.a), sp(p.b))));
    }
  }
  return out;
}

// Both rounds, with every pair that touches a node in `broken` failing.
struct TwoRounds {
  std::vector<std::string> nodes;
  std::vector<PairResult> r0;
  std::vector<CheckPair> plan1;
  NetworkCheckReport report;
};
TwoRounds RunBroken(int n, const std::set<std::string>& broken) {
  TwoRounds t;
  t.nodes = Nodes(n);
  t.r0 = Measure(PlanRound0(t.nodes), broken);
  t.plan1 = PlanRound1(t.nodes, t.r0);
  t.report = Evaluate(t.nodes, t.r0, Measure(t.plan1, broken));
  return t;
}

NodeVerdict VerdictOf(const NetworkCheckReport& r, const std::string& node) {
  for (const auto& n : r.nodes) {
    if (n.node == node) return n.verdict;
  }
  ADD_FAILURE() << "no verdict for " << node;
  return NodeVerdict::kHealthy;
}

// Checks the wave rule: within a round, a node is in at most one pair per wave.
void ExpectWavesDisjoint(const std::vector<CheckPair>& plan) {
  std::set<std::pair<int, std::string>> seen;
  for (const auto& p : plan) {
    EXPECT_NE(p.a, p.b);
    EXPECT_TRUE(seen.insert({p.wave, p.a}).second) << p.a << " twice in wave " << p.wave;
    EXPECT_TRUE(seen.insert({p.wave, p.b}).second) << p.b << " twice in wave " << p.wave;
  }
}

TEST(NetworkCheckPlan, Round0PairsNeighboursFor2To9Nodes) {
  for (int n = 2; n <= 9; ++n) {
    SCOPED_TRACE("nodes=" + std::to_string(n));
    auto nodes = Nodes(n);
    auto plan = PlanRound0(nodes);
    EXPECT_EQ(plan, PlanRound0(nodes));  // deterministic
    ExpectWavesDisjoint(plan);
    std::set<std::string> tested;
    for (const auto& p : plan) {
      EXPECT_EQ(p.round, 0);
      tested.insert(p.a);
      tested.insert(p.b);
    }
    EXPECT_EQ(tested.size(), static_cast<size_t>(n));
    ASSERT_EQ(plan.size(), static_cast<size_t>((n + 1) / 2));
    for (int i = 0; i + 1 < n; i += 2) {
      EXPECT_EQ(plan[i / 2], (CheckPair{nodes[i], nodes[i + 1], 0, 0}));
    }
    if (n % 2 == 1) {
      // The odd node out listens; its neighbour's second test runs in wave 1.
      EXPECT_EQ(plan.back(), (CheckPair{nodes[n - 1], nodes[n - 2], 0, 1}));
    }
  }
}

TEST(NetworkCheckPlan, ZeroOrOneNodeHasNothingToMeasure) {
  EXPECT_TRUE(PlanRound0({}).empty());
  EXPECT_TRUE(PlanRound0({"solo"}).empty());
  EXPECT_TRUE(PlanRound1({"solo"}, {}).empty());
  auto r = Evaluate({"solo"}, {}, {});
  ASSERT_EQ(r.nodes.size(), 1u);
  EXPECT_EQ(r.nodes[0].verdict, NodeVerdict::kHealthy);
  EXPECT_TRUE(r.Faulty().empty());
}

TEST(NetworkCheckPlan, AllHealthyNeedsNoRound1) {
  for (int n = 2; n <= 9; ++n) {
    auto nodes = Nodes(n);
    auto r0 = Measure(PlanRound0(nodes), {});
    EXPECT_TRUE(PlanRound1(nodes, r0).empty());
    auto report = Evaluate(nodes, r0, {});
    EXPECT_TRUE(report.Faulty().empty());
    EXPECT_TRUE(report.Stragglers().empty());
    EXPECT_DOUBLE_EQ(report.median_mbps, 1000);
  }
}

TEST(NetworkCheckPlan, FaultyNodeIsBlamedNotItsPartner) {
  auto [nodes, r0, plan1, report] = RunBroken(4, {"n1"});
  // Suspects n0 and n1 listen; the good nodes n2 and n3 connect, distinct partners.
  ASSERT_EQ(plan1.size(), 2u);
  EXPECT_EQ(plan1[0], (CheckPair{"n0", "n2", 1, 0}));
  EXPECT_EQ(plan1[1], (CheckPair{"n1", "n3", 1, 0}));
  EXPECT_EQ(report.Faulty(), std::vector<std::string>{"n1"});
  EXPECT_EQ(VerdictOf(report, "n0"), NodeVerdict::kHealthy);
  EXPECT_TRUE(report.isolated);
  EXPECT_EQ(report.nodes[1].reason,
            "round 0 with n0: connection to n1 timed out; "
            "round 1 with n3: connection to n1 timed out");
}

TEST(NetworkCheckPlan, DlroverSixNodeExample) {
  // reference/dlrover.md §3: round 0 {0,1},{2,3},{4,5}; {4,5} fails; node 5 is faulty.
  auto [nodes, r0, plan1, report] = RunBroken(6, {"n5"});
  ExpectWavesDisjoint(plan1);
  ASSERT_EQ(plan1.size(), 2u);
  EXPECT_EQ(plan1[0], (CheckPair{"n4", "n0", 1, 0}));
  EXPECT_EQ(plan1[1], (CheckPair{"n5", "n1", 1, 0}));
  EXPECT_EQ(report.Faulty(), std::vector<std::string>{"n5"});
}

TEST(NetworkCheckPlan, MoreSuspectsThanGoodNodesUseWaves) {
  auto [nodes, r0, plan1, report] = RunBroken(6, {"n0", "n3"});
  ExpectWavesDisjoint(plan1);
  std::vector<CheckPair> want = {
      {"n0", "n4", 1, 0}, {"n1", "n5", 1, 0}, {"n2", "n4", 1, 1}, {"n3", "n5", 1, 1}};
  EXPECT_EQ(plan1, want);
  EXPECT_EQ(report.Faulty(), (std::vector<std::string>{"n0", "n3"}));
  EXPECT_TRUE(report.isolated);
}

TEST(NetworkCheckPlan, OddNodeOutAndABrokenNeighbour) {
  auto [nodes, r0, plan1, report] = RunBroken(5, {"n3"});  // fails {n2,n3} and {n4,n3}
  std::vector<CheckPair> want = {{"n2", "n0", 1, 0}, {"n3", "n1", 1, 0}, {"n4", "n0", 1, 1}};
  EXPECT_EQ(plan1, want);
  EXPECT_EQ(report.Faulty(), std::vector<std::string>{"n3"});
}

TEST(NetworkCheckPlan, ThreeNodesWithTheMiddleOneBrokenPairsTheSuspects) {
  // Every round-0 pair touches n1, so there is no good node: n0 and n2 try each other.
  auto [nodes, r0, plan1, report] = RunBroken(3, {"n1"});
  ASSERT_EQ(plan1.size(), 1u);
  EXPECT_EQ(plan1[0], (CheckPair{"n0", "n2", 1, 0}));
  EXPECT_EQ(report.Faulty(), std::vector<std::string>{"n1"});
  EXPECT_TRUE(report.isolated);
  EXPECT_NE(report.nodes[1].reason.find("no partner to re-test with"), std::string::npos);
}

TEST(NetworkCheckPlan, NoReferenceMeansEveryNodeOfTheFailedPairIsFaulty) {
  auto nodes = Nodes(2);
  auto r0 = Measure(PlanRound0(nodes), {"n1"});
  EXPECT_TRUE(PlanRound1(nodes, r0).empty());
  auto report = Evaluate(nodes, r0, {});
  EXPECT_EQ(report.Faulty(), (std::vector<std::string>{"n0", "n1"}));
  EXPECT_FALSE(report.isolated);

  // Four nodes, every link broken: round 1 tries new pairs, which fail too.
  auto four = Nodes(4);
  std::set<std::string> all(four.begin(), four.end());
  auto f0 = Measure(PlanRound0(four), all);
  auto plan1 = PlanRound1(four, f0);
  std::vector<CheckPair> want = {{"n0", "n2", 1, 0}, {"n1", "n3", 1, 0}};
  EXPECT_EQ(plan1, want);
  auto r = Evaluate(four, f0, Measure(plan1, all));
  EXPECT_EQ(r.Faulty(), four);
  EXPECT_FALSE(r.isolated);
}

TEST(NetworkCheckPlan, FourNodesTwoBrokenInDifferentPairsAreIsolatedInRound1) {
  auto nodes = Nodes(4);
  auto r0 = Measure(PlanRound0(nodes), {"n0", "n2"});
  auto plan1 = PlanRound1(nodes, r0);  // {n0,n2}, {n1,n3}
  auto report = Evaluate(nodes, r0, Measure(plan1, {"n0", "n2"}));
  EXPECT_EQ(report.Faulty(), (std::vector<std::string>{"n0", "n2"}));
  EXPECT_TRUE(report.isolated);  // n1 and n3 were cleared in round 1
}

TEST(NetworkCheckPlan, MissingResultCountsAsFailed) {
  auto nodes = Nodes(4);
  auto plan0 = PlanRound0(nodes);
  std::vector<PairResult> r0 = {Ok(plan0[0], 900)};  // {n2,n3} never reported
  auto plan1 = PlanRound1(nodes, r0);
  ASSERT_EQ(plan1.size(), 2u);
  auto report = Evaluate(nodes, r0, {});  // nor did round 1
  EXPECT_EQ(report.Faulty(), (std::vector<std::string>{"n2", "n3"}));
  EXPECT_EQ(report.pairs[1].reason, "no result");
}

TEST(NetworkCheckPlan, StragglerExactlyAtTheThresholdIsNotOne) {
  // Node bandwidths 1000 x4 and 500 x2: the median is 1000, the threshold 500.
  auto nodes = Nodes(6);
  auto r0 = Measure(PlanRound0(nodes), {}, {{"n4", 500}, {"n5", 500}});
  EXPECT_TRUE(PlanRound1(nodes, r0).empty());
  auto report = Evaluate(nodes, r0, {});
  EXPECT_DOUBLE_EQ(report.median_mbps, 1000);
  EXPECT_DOUBLE_EQ(report.straggler_below_mbps, 500);
  EXPECT_TRUE(report.Stragglers().empty());
}

TEST(NetworkCheckPlan, SlowNodeIsTheStragglerNotItsPartner) {
  auto nodes = Nodes(6);
  std::map<std::string, double> speed = {{"n5", 499.9}};
  auto r0 = Measure(PlanRound0(nodes), {}, speed);
  auto plan1 = PlanRound1(nodes, r0);  // both n4 and n5 are re-tested
  std::vector<CheckPair> want = {{"n4", "n0", 1, 0}, {"n5", "n1", 1, 0}};
  EXPECT_EQ(plan1, want);
  auto report = Evaluate(nodes, r0, Measure(plan1, {}, speed));
  EXPECT_EQ(report.Stragglers(), std::vector<std::string>{"n5"});
  EXPECT_EQ(VerdictOf(report, "n4"), NodeVerdict::kHealthy);
  EXPECT_TRUE(report.Faulty().empty());
  EXPECT_NE(report.nodes[5].reason.find("499.9 MB/s is below 0.5 x the median 1000.0"),
            std::string::npos)
      << report.nodes[5].reason;
}

TEST(NetworkCheckPlan, MedianOfAnEvenCountIsTheMeanOfTheMiddleTwo) {
  auto nodes = Nodes(4);
  auto r0 = Measure(PlanRound0(nodes), {}, {{"n2", 600}});
  EXPECT_TRUE(PlanRound1(nodes, r0).empty());  // threshold 400
  auto report = Evaluate(nodes, r0, {});
  EXPECT_DOUBLE_EQ(report.median_mbps, 800);  // {600, 600, 1000, 1000}
  EXPECT_TRUE(report.Stragglers().empty());

  NetworkCheckOptions o;
  o.straggler_fraction = 0.8;  // threshold 640: n2 and n3 are suspects in round 0
  auto plan1 = PlanRound1(nodes, r0, o);
  ASSERT_EQ(plan1.size(), 2u);
  auto with = Evaluate(nodes, r0, Measure(plan1, {}, {{"n2", 600}}), o);
  EXPECT_EQ(with.Stragglers(), std::vector<std::string>{"n2"});
}

TEST(NetworkCheckPlan, StragglerDetectionOff) {
  NetworkCheckOptions o;
  o.straggler_fraction = 0;
  auto nodes = Nodes(4);
  auto r0 = Measure(PlanRound0(nodes), {}, {{"n3", 10}});
  EXPECT_TRUE(PlanRound1(nodes, r0, o).empty());
  EXPECT_TRUE(Evaluate(nodes, r0, {}, o).Stragglers().empty());
}

TEST(NetworkCheckPlan, BelowMinimumBandwidthFailsThePair) {
  NetworkCheckOptions o;
  o.min_bandwidth_mbps = 800;
  o.straggler_fraction = 0;
  auto nodes = Nodes(4);
  std::map<std::string, double> speed = {{"n1", 700}};
  auto r0 = Measure(PlanRound0(nodes), {}, speed);
  auto plan1 = PlanRound1(nodes, r0, o);
  ASSERT_EQ(plan1.size(), 2u);
  auto report = Evaluate(nodes, r0, Measure(plan1, {}, speed), o);
  EXPECT_EQ(report.Faulty(), std::vector<std::string>{"n1"});
  EXPECT_FALSE(report.pairs[0].ok);
  EXPECT_EQ(report.pairs[0].reason, "700.0 MB/s is below the minimum 800.0 MB/s");
  // Exactly at the minimum passes.
  o.min_bandwidth_mbps = 700;
  EXPECT_TRUE(PlanRound1(nodes, r0, o).empty());
}

TEST(NetworkCheckPlan, TableAndJson) {
  auto nodes = Nodes(4);
  auto r0 = Measure(PlanRound0(nodes), {"n1"});
  auto r1 = Measure(PlanRound1(nodes, r0), {"n1"});
  auto report = Evaluate(nodes, r0, r1);
  auto lines = RenderTable(report);
  ASSERT_EQ(lines.size(), 1u + 4u + 4u + 1u);  // header, 4 pairs, 4 nodes, summary
  EXPECT_NE(lines[0].find("a->b MB/s"), std::string::npos);
  EXPECT_NE(lines[1].find("FAILED: connection to n1 timed out"), std::string::npos) << lines[1];
  EXPECT_NE(lines[2].find("1000.0"), std::string::npos) << lines[2];
  EXPECT_NE(lines[2].find(" ok"), std::string::npos) << lines[2];
  EXPECT_NE(lines[6].find("faulty (round 0 with n0"), std::string::npos) << lines[6];
  std::string json = ToJson(report).str();
  EXPECT_NE(json.find("\"event\":\"network_check\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"faulty\":[\"n1\"]"), std::string::npos) << json;
  EXPECT_NE(json.find("\"verdict\":\"faulty\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"mbps_ab\":1000"), std::string::npos) << json;
}

}  // namespace
}  // namespace ftrun::rendezvous
