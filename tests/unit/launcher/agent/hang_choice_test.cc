// ChooseHungRank: which of a node's silent ranks a hang verdict declares failed, from the
// ranks the merged stacks name as stuck where the others are not.
#include <gtest/gtest.h>

#include "launcher/agent/hang_detector.h"

namespace ftrun::launcher {
namespace {

// Node of two local ranks holding global ranks 2 and 3.
const std::vector<int> kGlobals = {2, 3};

TEST(ChooseHungRank, WithoutAStuckRankTheLongestSilentIsDeclared) {
  auto c = ChooseHungRank({1, 0}, kGlobals, {});
  EXPECT_EQ(c.local_rank, 1);
  EXPECT_FALSE(c.elsewhere);
}

TEST(ChooseHungRank, TheStuckRankIsDeclaredEvenWhenAnotherWasSilentLonger) {
  // Rank 2 waits in a collective for rank 3, which is stuck elsewhere in the code.
  auto c = ChooseHungRank({0, 1}, kGlobals, {3});
  EXPECT_EQ(c.local_rank, 1);
  EXPECT_FALSE(c.elsewhere);
}

TEST(ChooseHungRank, RanksWaitingForAnotherNodesStuckRankAreLeftHealthy) {
  // The stuck rank 0 runs on another node: ranks 2 and 3 only wait for it, and must stay
  // able to serve the fault-time save.
  auto c = ChooseHungRank({0, 1}, kGlobals, {0});
  EXPECT_EQ(c.local_rank, -1);
  EXPECT_TRUE(c.elsewhere);
}

TEST(ChooseHungRank, AStuckRankHereThatIsNotSilentYetLeavesTheLongestSilent) {
  auto c = ChooseHungRank({0}, kGlobals, {0, 3});
  EXPECT_EQ(c.local_rank, 0);
  EXPECT_FALSE(c.elsewhere);
}

}  // namespace
}  // namespace ftrun::launcher
