#include "rendezvous/save_planner.h"

#include <gtest/gtest.h>

namespace ftrun::rendezvous {
namespace {

RankProgress R(int rank, const std::string& group, int64_t step, bool updating = false,
               bool healthy = true, bool handler = true) {
  return RankProgress{rank, group, step, updating, healthy, handler};
}

TEST(SavePlanner, PlainDdpOneGroupLowestHealthyRankSaves) {
  // Rank 0 died; ranks 1-3 finished step 41; the failed step 42 is in flight nowhere.
  auto r = PlanSave({R(0, "", 41, false, false), R(1, "", 41), R(2, "", 41), R(3, "", 41)});
  ASSERT_TRUE(r.decision) << r.why_not;
  EXPECT_EQ(r.decision->step, 41);
  ASSERT_EQ(r.decision->savers.size(), 1u);
  EXPECT_EQ(r.decision->savers[0].rank, 1);
}

TEST(SavePlanner, MidUpdateMembersAreSkipped) {
  auto r = PlanSave({R(0, "", 10, true), R(1, "", 9), R(2, "", 10, true)});
  ASSERT_TRUE(r.decision);
  EXPECT_EQ(r.decision->step, 9);
  EXPECT_EQ(r.decision->savers[0].rank, 1);
}

TEST(SavePlanner, NewestStepEveryGroupCanProvide) {
  // Shards a and b, two replicas each (MindIO's [0,2] [1,3] layout).
  auto r = PlanSave({R(0, "a", 7), R(2, "a", 8), R(1, "b", 7), R(3, "b", 8, false, false)});
  ASSERT_TRUE(r.decision) << r.why_not;
  EXPECT_EQ(r.decision->step, 7);  // b cannot provide 8: its only member at 8 is dead
  ASSERT_EQ(r.decision->savers.size(), 2u);
  EXPECT_EQ(r.decision->savers[0].rank, 0);
  EXPECT_EQ(r.decision->savers[0].group, "a");
  EXPECT_EQ(r.decision->savers[1].rank, 1);
}

TEST(SavePlanner, GroupWithNoHealthyMemberMeansNoSave) {
  auto r = PlanSave({R(0, "a", 5), R(1, "b", 5, false, false), R(3, "b", 5, true)});
  EXPECT_FALSE(r.decision);
  EXPECT_EQ(r.why_not,
            "replica group 'b' has no healthy member whose last optimizer update finished");
}

TEST(SavePlanner, NoCommonStep) {
  auto r = PlanSave({R(0, "a", 5), R(1, "b", 6)});
  EXPECT_FALSE(r.decision);
  EXPECT_EQ(r.why_not, "the replica groups have no finished step in common");
}

TEST(SavePlanner, NoHandlerOrNoStepYet) {
  EXPECT_EQ(PlanSave({R(0, "", 5, false, true, false)}).why_not,
            "no rank registered a save handler");
  EXPECT_EQ(PlanSave({}).why_not, "no rank registered a save handler");
  EXPECT_FALSE(PlanSave({R(0, "", -1), R(1, "", -1)}).decision);
}

}  // namespace
}  // namespace ftrun::rendezvous
