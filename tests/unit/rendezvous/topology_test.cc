// Topology-aware rank order: the topology file's parsing, the switch-path checks, and the
// order a round gives its members (rendezvous/topology.h), up to 1,000 simulated nodes.
#include "rendezvous/topology.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "tests/unit/rendezvous/rendezvous_state_fixture.h"

namespace ftrun::rendezvous {
namespace {

using std::chrono::seconds;

TEST(Topology, ParsesDlroversFormatAndDeeperPaths) {
  auto map = ParseTopology(
      "# asw psw ip\n"
      "asw-0 psw-0 192.168.0.0\n"
      "\n"
      "  asw-1 psw-0 192.168.0.1   # trailing comment\n"
      "tor-7 spine-2 super-1 node-9.example\n",
      "topo.txt");
  ASSERT_TRUE(map) << map.error().message;
  EXPECT_EQ(map->size(), 3u);
  EXPECT_EQ(map->at("192.168.0.0"), "asw-0/psw-0");
  EXPECT_EQ(map->at("192.168.0.1"), "asw-1/psw-0");
  EXPECT_EQ(map->at("node-9.example"), "tor-7/spine-2/super-1");
  EXPECT_EQ(SwitchPathOf(*map, {"10.0.0.1", "node-9.example"}), "tor-7/spine-2/super-1");
  EXPECT_EQ(SwitchPathOf(*map, {"10.0.0.1", ""}), "");
}

TEST(Topology, BadLinesNameTheLineAndTheCulprit) {
  auto one = ParseTopology("asw-0 psw-0 10.0.0.1\n10.0.0.2\n", "topo.txt");
  ASSERT_FALSE(one);
  EXPECT_NE(one.error().message.find("topo.txt line 2"), std::string::npos);
  EXPECT_NE(one.error().message.find("needs at least one switch"), std::string::npos);
  auto twice = ParseTopology("asw-0 psw-0 10.0.0.1\nasw-1 psw-0 10.0.0.1\n", "t");
  ASSERT_FALSE(twice);
  EXPECT_NE(twice.error().message.find("10.0.0.1 is listed twice"), std::string::npos)
      << twice.error().message;
  EXPECT_TRUE(ParseTopology("asw-0 psw-0 10.0.0.1\nasw-0 psw-0 10.0.0.1\n", "t"));  // same: ok
  auto binary = ParseTopology(std::string("asw\x01 10.0.0.1\n"), "t");
  ASSERT_FALSE(binary);
  EXPECT_NE(binary.error().message.find("t line 1"), std::string::npos);
  auto missing = ReadTopologyFile("/nonexistent/topology.txt");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find("/nonexistent/topology.txt"), std::string::npos);
}

TEST(Topology, SwitchPathChecks) {
  EXPECT_TRUE(CheckSwitchPath(""));
  EXPECT_TRUE(CheckSwitchPath("asw-3/psw-0"));
  EXPECT_FALSE(CheckSwitchPath("asw 3/psw-0"));
  EXPECT_FALSE(CheckSwitchPath("asw-3//psw-0"));
  EXPECT_FALSE(CheckSwitchPath(std::string(kMaxSwitchPathBytes + 1, 'a')));
  std::string deep = "s";
  for (size_t i = 0; i < kMaxSwitchLevels; ++i) deep += "/s";
  EXPECT_FALSE(CheckSwitchPath(deep));
  EXPECT_EQ(TopologyKey("asw-3/psw-0"), (std::vector<std::string>{"psw-0", "asw-3"}));
}

class TopologyOrder : public RendezvousStateTest {
 protected:
  void JoinAt(const std::string& id, const std::string& path) {
    NodeInfo n = Node(id, 1);
    n.switch_path = path;
    auto refusal = state_->Join(n, now_);
    ASSERT_FALSE(refusal) << refusal->message;
  }
  std::vector<std::string> PathsInRankOrder(const std::map<std::string, std::string>& path_of) {
    std::vector<std::string> out(path_of.size());
    for (const auto& [id, path] : path_of) {
      NodeView v = View(id);
      EXPECT_TRUE(v.member) << id;
      if (v.member) out.at(v.assignment.group_rank) = path;
    }
    return out;
  }
};

// Nodes of one access switch hold one contiguous block of group ranks, and access switches
// of one spine switch are next to each other, however the nodes joined.
void ExpectBlocks(const std::vector<std::string>& paths) {
  std::set<std::string> closed_asw, closed_psw;
  for (size_t i = 0; i < paths.size(); ++i) {
    const auto key = TopologyKey(paths[i]);
    if (i > 0 && paths[i] != paths[i - 1]) {
      closed_asw.insert(paths[i - 1]);
      const auto prev = TopologyKey(paths[i - 1]);
      if (prev.front() != key.front()) closed_psw.insert(prev.front());
    }
    EXPECT_FALSE(closed_asw.count(paths[i]))
        << "rank " << i << " under " << paths[i] << " is apart from its switch's other nodes";
    EXPECT_FALSE(closed_psw.count(key.front())) << "rank " << i << " under " << key.front();
  }
}

TEST_F(TopologyOrder, AThousandNodesGetRanksBlockedBySwitchInAnyJoinOrder) {
  constexpr int kNodes = 1000;
  Make(Spec(kNodes, kNodes));
  std::mt19937 rng(7);
  std::map<std::string, std::string> path_of;
  std::vector<std::string> ids;
  for (int i = 0; i < kNodes; ++i) {
    const int asw = static_cast<int>(rng() % 40), psw = asw % 5;  // 40 access, 5 spine switches
    const std::string id = "n" + std::to_string(i);
    path_of[id] = "asw-" + std::to_string(asw) + "/psw-" + std::to_string(psw);
    ids.push_back(id);
  }
  std::shuffle(ids.begin(), ids.end(), rng);
  for (const auto& id : ids) JoinAt(id, path_of.at(id));
  ASSERT_EQ(phase(), Phase::kRunning);
  ExpectBlocks(PathsInRankOrder(path_of));
}

TEST_F(TopologyOrder, TheSameMembersKeepTheirRanksAcrossARestart) {
  Make(Spec(4, 4, /*max_restarts=*/3));
  const std::map<std::string, std::string> path_of = {
      {"a", "asw-1/psw-0"}, {"b", "asw-0/psw-0"}, {"c", "asw-1/psw-0"}, {"d", "asw-0/psw-0"}};
  for (const auto& [id, path] : path_of) JoinAt(id, path);
  ASSERT_EQ(phase(), Phase::kRunning);
  std::map<std::string, int> before;
  for (const auto& [id, _] : path_of) before[id] = View(id).assignment.group_rank;
  EXPECT_EQ(before["b"], 0);  // asw-0 first: b and d, in join order
  EXPECT_EQ(before["d"], 1);
  EXPECT_EQ(before["a"], 2);
  EXPECT_EQ(before["c"], 3);
  state_->ReportFailed("c", 0, {Failure(3)}, now_);
  StopAll(0, {"a", "b", "c", "d"});
  ASSERT_EQ(phase(), Phase::kRunning);
  for (const auto& [id, rank] : before) EXPECT_EQ(View(id).assignment.group_rank, rank) << id;
}

TEST_F(TopologyOrder, NodesWithoutAPathComeAfterTheOthers) {
  Make(Spec(3, 3));
  JoinAt("a", "");
  JoinAt("b", "asw-9/psw-0");
  JoinAt("c", "asw-1/psw-0");
  ASSERT_EQ(phase(), Phase::kRunning);
  EXPECT_EQ(View("c").assignment.group_rank, 0);
  EXPECT_EQ(View("b").assignment.group_rank, 1);
  EXPECT_EQ(View("a").assignment.group_rank, 2);
  EXPECT_EQ(View("c").assignment.master_addr, "c.addr");
}

TEST_F(TopologyOrder, ASpareTakingALostNodesPlaceJoinsItsSwitchsBlock) {
  Make(Spec(1, 3));
  JoinAt("a", "asw-0/psw-0");
  JoinAt("b", "asw-1/psw-0");
  JoinAt("c", "asw-0/psw-0");
  ASSERT_EQ(phase(), Phase::kRunning);
  JoinAt("s", "asw-1/psw-0");  // a spare
  alive_ = {"a", "c", "s"};
  Advance(seconds(16));  // b is lost
  ASSERT_EQ(phase(), Phase::kStopping);
  StopAll(0, {"a", "c"});
  ASSERT_EQ(phase(), Phase::kRunning);
  EXPECT_EQ(View("a").assignment.group_rank, 0);  // the survivors keep their ranks
  EXPECT_EQ(View("c").assignment.group_rank, 1);
  EXPECT_EQ(View("s").assignment.group_rank, 2);
}

}  // namespace
}  // namespace ftrun::rendezvous
