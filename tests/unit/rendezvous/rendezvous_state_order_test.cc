// The order of group ranks in a dynamic rendezvous: joining order, except that nodes which
// declare a rank (dlrover-run: NODE_RANK) come first in that rank's order, as DLRover's master
// sorts its nodes.
#include "tests/unit/rendezvous/rendezvous_state_fixture.h"

namespace ftrun::rendezvous {
namespace {

using std::chrono::seconds;

TEST_F(RendezvousStateTest, DeclaredRanksComeFirstInTheirOrderTheOthersInJoiningOrder) {
  Make(Spec(4, 4));
  Join("c", 2, 7);
  Join("x");
  Join("a", 2, 0);
  Join("y");
  ASSERT_EQ(phase(), Phase::kRunning);
  EXPECT_EQ(View("a").assignment.group_rank, 0);
  EXPECT_EQ(View("c").assignment.group_rank, 1);
  EXPECT_EQ(View("x").assignment.group_rank, 2);
  EXPECT_EQ(View("y").assignment.group_rank, 3);
  EXPECT_EQ(View("c").assignment.master_addr, "a.addr");
}

TEST_F(RendezvousStateTest, BeyondTheRoundsSizeTheLowestDeclaredRanksGetIn) {
  JobSpec spec = Spec(2, 4);
  spec.node_unit = 2;
  Make(spec);
  alive_ = {"n2", "n1", "n0"};
  Join("n2", 2, 2);
  Join("n1", 2, 1);
  Join("n0", 2, 0);
  Advance(seconds(31));  // the last call ends with 3 nodes: a round of 2
  ASSERT_EQ(phase(), Phase::kRunning);
  EXPECT_EQ(View("n0").assignment.group_rank, 0);
  EXPECT_EQ(View("n1").assignment.group_rank, 1);
  EXPECT_FALSE(View("n2").member);
}

TEST_F(RendezvousStateTest, SurvivorsKeepTheirPlacesAndEqualDeclaredRanksGoByJoiningOrder) {
  Make(Spec(2, 2, 1));
  alive_ = {"b", "a"};
  Join("b", 2, 1);
  Join("a", 2, 1);  // the same rank: joining order decides
  ASSERT_EQ(phase(), Phase::kRunning);
  EXPECT_EQ(View("b").assignment.group_rank, 0);
  EXPECT_EQ(View("a").assignment.group_rank, 1);
  const uint64_t round = View("a").assignment.round;
  state_->ReportFailed("a", round, {}, now_);
  StopAll(round, {"a", "b"});
  Advance(std::chrono::milliseconds(10));
  ASSERT_EQ(phase(), Phase::kRunning);
  EXPECT_EQ(View("b").assignment.group_rank, 0);
  EXPECT_EQ(View("a").assignment.group_rank, 1);
}

}  // namespace
}  // namespace ftrun::rendezvous
