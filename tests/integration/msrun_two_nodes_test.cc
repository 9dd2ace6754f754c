// msrun with two agents on loopback: fixed and assigned node ranks, one scheduler between them.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tests/integration/msrun_fixture.h"

namespace ftrun::testing {
namespace {

using namespace std::chrono_literals;

class MsrunTwoNodes : public Msrun {
 protected:
  // Runs two agents (node 1 first, so that it waits for the master), each recording into
  // its own directory; returns {node 0's records, node 1's records}.
  std::pair<std::vector<Record>, std::vector<Record>> RunBoth(const std::string& rank0,
                                                              const std::string& rank1) {
    std::vector<std::string> opts = {"--worker_num", "4",    "--local_worker_num", "2",
                                     "--join",       "True", "--node_rank"};
    const std::string rec0 = dir_ / "rec0", rec1 = dir_ / "rec1";
    std::filesystem::create_directories(rec0);
    std::filesystem::create_directories(rec1);
    auto o1 = opts, o0 = opts;
    o1.push_back(rank1);
    o0.push_back(rank0);
    ChildRun n1(FtrunBinary(), Cmd(o1, {"--steps", "2"}, rec1, dir_ / "logs1"), {}, kUnset);
    ChildRun n0(FtrunBinary(), Cmd(o0, {"--steps", "2"}, rec0, dir_ / "logs0"), {}, kUnset);
    auto r0 = n0.Wait(30s), r1 = n1.Wait(30s);
    EXPECT_EQ(r0.exit_code, 0) << r0.err;
    EXPECT_EQ(r1.exit_code, 0) << r1.err;
    return {ReadRecords(rec0), ReadRecords(rec1)};
  }

  // The global ranks of the workers in `records`, checking MS_NODE_ID == RANK_ID.
  std::set<int> Ranks(const std::vector<Record>& records, const std::string& node_rank) {
    std::set<int> out;
    for (const auto& w : OfRole(records, "worker")) {
      EXPECT_EQ(w.env.at("MS_NODE_ID"), w.env.at("RANK_ID"));
      EXPECT_EQ(w.env.at("MS_NODE_RANK"), node_rank);
      EXPECT_EQ(w.env.at("MS_WORKER_NUM"), "4");
      EXPECT_EQ(w.env.at("RANK_SIZE"), "4");
      EXPECT_EQ(w.env.at("MS_SCHED_PORT"), port_);
      EXPECT_TRUE(out.insert(std::stoi(w.env.at("RANK_ID"))).second) << "a rank ran twice";
    }
    return out;
  }
};

TEST_F(MsrunTwoNodes, FixedNodeRanks) {
  auto [node0, node1] = RunBoth("0", "1");
  // On loopback both agents are on master_addr: the one that hosts the rendezvous (the first
  // to bind) runs the scheduler, whatever its node rank.
  EXPECT_EQ(OfRole(node0, "scheduler").size() + OfRole(node1, "scheduler").size(), 1u);
  EXPECT_EQ(Ranks(node0, "0"), (std::set<int>{0, 1}));
  EXPECT_EQ(Ranks(node1, "1"), (std::set<int>{2, 3}));
}

TEST_F(MsrunTwoNodes, AssignedNodeRanks) {
  auto [a, b] = RunBoth("-1", "-1");
  EXPECT_EQ(OfRole(a, "scheduler").size() + OfRole(b, "scheduler").size(), 1u);
  std::set<int> ra = Ranks(a, "-1"), rb = Ranks(b, "-1");
  ASSERT_EQ(ra.size(), 2u);
  ASSERT_EQ(rb.size(), 2u);
  std::set<int> all = ra;
  all.insert(rb.begin(), rb.end());
  EXPECT_EQ(all, (std::set<int>{0, 1, 2, 3}));
  EXPECT_EQ(*ra.rbegin() - *ra.begin(), 1) << "a node's ranks are contiguous";
}

}  // namespace
}  // namespace ftrun::testing

namespace ftrun::testing {
namespace {

// msrun's "Distributed job is spawned" comes when this node's workers exist, not while it
// waits for the other nodes.
TEST_F(MsrunTwoNodes, SpawnedIsSaidOnceTheWorkersExist) {
  constexpr const char* kSpawned = "Distributed job is spawned";
  std::vector<std::string> opts = {"--worker_num", "4",   "--local_worker_num", "2",
                                   "--join",       "True"};
  const std::string rec0 = dir_ / "rec0", rec1 = dir_ / "rec1";
  std::filesystem::create_directories(rec0);
  std::filesystem::create_directories(rec1);
  ChildRun first(FtrunBinary(), Cmd(opts, {"--steps", "2"}, rec1, dir_ / "logs1"), {}, kUnset);
  ASSERT_TRUE(WaitFor([&] { return first.Err().find("joined the job") != std::string::npos; }, 20s))
      << first.Err();
  EXPECT_EQ(first.Err().find(kSpawned), std::string::npos) << first.Err();
  ChildRun second(FtrunBinary(), Cmd(opts, {"--steps", "2"}, rec0, dir_ / "logs0"), {}, kUnset);
  auto r1 = first.Wait(30s), r0 = second.Wait(30s);
  for (const auto* r : {&r0, &r1}) {
    EXPECT_EQ(r->exit_code, 0) << r->err;
    const size_t spawned = r->err.find(kSpawned);
    ASSERT_NE(spawned, std::string::npos) << r->err;
    EXPECT_EQ(r->err.find(kSpawned, spawned + 1), std::string::npos) << "said twice:\n" << r->err;
    EXPECT_LT(r->err.find("round started"), spawned) << r->err;
  }
}

}  // namespace
}  // namespace ftrun::testing
