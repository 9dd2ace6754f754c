// flash_plan.h: the restore step a round decides from its members' inventories, the order
// of a node's replica targets by switch, the agent's trimming, and the inventory's wire limits
// (in a join and in a stopped report).
#include "rendezvous/flash_plan.h"

#include <gtest/gtest.h>

#include "rendezvous/wire.h"

namespace ftrun::rendezvous {
namespace {

NodeInfo Holding(std::vector<FlashCopy> copies) {
  NodeInfo n;
  n.flash = std::move(copies);
  n.flash_reported = true;
  return n;
}

TEST(PlanRestore, TheOneCopyIsTheNewestStepAnyMemberHolds) {
  NodeInfo a = Holding({{"", 0, {7, 6}}}), b = Holding({{"", 0, {9, 8}}}), c = Holding({});
  auto plan = PlanRestore({&a, &b, &c}, 6);
  EXPECT_EQ(plan.copy, 9);
  EXPECT_EQ(plan.shards, -1);  // nobody holds a shard
}

TEST(PlanRestore, ShardsNeedEveryRankAtOneStep) {
  // Rank 1's node holds 5 and 4; rank 0's holds 5 only in a replica on node b.
  NodeInfo a = Holding({{"rank-0", 2, {6}}}),
           b = Holding({{"rank-1", 2, {5, 4}}, {"rank-0", 0, {5}}});
  EXPECT_EQ(PlanRestore({&a, &b}, 2).shards, 5);
  // Without the replica no step has both shards.
  NodeInfo b2 = Holding({{"rank-1", 2, {5, 4}}});
  EXPECT_EQ(PlanRestore({&a, &b2}, 2).shards, -1);
}

TEST(PlanRestore, ShardsOfAnotherWorldSizeOrBeyondItDoNotCount) {
  NodeInfo a = Holding({{"rank-0", 4, {3}}, {"rank-1", 2, {3}}});
  NodeInfo b = Holding({{"rank-0", 2, {2}}, {"rank-1", 2, {2}}, {"rank-2", 2, {9}}});
  auto plan = PlanRestore({&a, &b}, 2);
  EXPECT_EQ(plan.shards, 2);  // step 3's rank-0 was saved by 4 ranks; rank-2 is not a rank
  NodeInfo odd = Holding({{"rank-x", 0, {9}}, {"rank-", 0, {9}}, {"rank-01x", 0, {9}}});
  EXPECT_EQ(PlanRestore({&odd}, 1).shards, -1);
}

TEST(PlanRestore, AMemberThatDoesNotReportLeavesItUndecided) {
  NodeInfo a = Holding({{"", 0, {7}}}), old;  // an older agent: flash_reported false
  auto plan = PlanRestore({&a, &old}, 4);
  EXPECT_FALSE(plan.copy);
  EXPECT_FALSE(plan.shards);
  EXPECT_EQ(DescribeRestore(plan.copy, plan.shards), "undecided");
  EXPECT_EQ(DescribeRestore(7, -1), "copy=7 shards=none");
}

TEST(ReplicaOrder, WithoutTopologyTheNodesAfterThisOneWrapping) {
  EXPECT_EQ(ReplicaOrder({"", "", "", ""}, 2), (std::vector<int>{3, 0, 1}));
  EXPECT_EQ(ReplicaOrder({""}, 0), (std::vector<int>{}));
  EXPECT_EQ(ReplicaOrder({"", ""}, 5), (std::vector<int>{}));
}

TEST(ReplicaOrder, NodesUnderADifferentSwitchComeFirst) {
  // Rounds give nodes under one switch adjacent ranks: the next node shares the switch.
  std::vector<std::string> paths = {"asw-1/psw-0", "asw-1/psw-0", "asw-2/psw-0", "asw-2/psw-0"};
  EXPECT_EQ(ReplicaOrder(paths, 0), (std::vector<int>{2, 3, 1}));
  EXPECT_EQ(ReplicaOrder(paths, 3), (std::vector<int>{0, 1, 2}));
  // A node whose switch is unknown is not known to be elsewhere: it comes after.
  EXPECT_EQ(ReplicaOrder({"asw-1", "", "asw-1", "asw-9"}, 0), (std::vector<int>{3, 1, 2}));
  // This node's own switch unknown: the plain order.
  EXPECT_EQ(ReplicaOrder({"", "asw-1", "asw-2"}, 0), (std::vector<int>{1, 2}));
}

TEST(TrimFlashInventory, KeepsTheNewestStepsAndSaysWhatItCut) {
  std::vector<FlashCopy> inv = {{"", 0, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}},
                                {std::string(65, 'g'), 0, {1}}};
  for (int i = 0; i < 1100; ++i) inv.push_back({"rank-" + std::to_string(i), 1100, {1}});
  const std::string cut = TrimFlashInventory(inv);
  EXPECT_EQ(inv.size(), kMaxFlashCopies);
  EXPECT_EQ(inv[0].steps, (std::vector<int64_t>{10, 9, 8, 7, 6, 5, 4, 3}));
  EXPECT_NE(cut.find("77 copies beyond 1024"), std::string::npos) << cut;
  EXPECT_NE(cut.find("2 older steps"), std::string::npos) << cut;
  EXPECT_NE(cut.find("1 group names over 64 bytes"), std::string::npos) << cut;
  std::vector<FlashCopy> small = {{"", 0, {3}}};
  EXPECT_EQ(TrimFlashInventory(small), "");
}

TEST(FlashWire, RoundTripsAndRefusesAnInventoryBeyondTheLimits) {
  NodeInfo n = Holding({{"", 0, {5, 4}}, {"rank-3", 8, {2}}});
  n.nproc_per_node = 1;
  v1::NodeInfo w;
  ToWire(n, &w);
  NodeInfo back = FromWire(w, "id");
  EXPECT_TRUE(back.flash_reported);
  EXPECT_EQ(back.flash, n.flash);
  EXPECT_TRUE(CheckLimits(w));

  v1::NodeInfo many = w;
  for (size_t i = 0; i < kMaxFlashCopies; ++i) many.add_flash()->set_group("x");
  auto s = CheckLimits(many);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("1026 copies"), std::string::npos) << s.error().message;

  v1::NodeInfo steps = w;
  for (int i = 0; i < 9; ++i) steps.mutable_flash(0)->add_steps(i);
  EXPECT_FALSE(CheckLimits(steps));
  v1::NodeInfo negative = w;
  negative.mutable_flash(1)->set_steps(0, -3);
  EXPECT_FALSE(CheckLimits(negative));
  v1::NodeInfo name = w;
  name.mutable_flash(0)->set_group(std::string(65, 'a'));
  EXPECT_FALSE(CheckLimits(name));
}

TEST(FlashWire, AStoppedReportCarriesTheInventoryOrSaysItHasNone) {
  RoundReport r = RoundReport::Of(ReportKind::kStopped, 4);
  r.flash = std::vector<FlashCopy>{{"", 0, {5, 4}}, {"rank-3", 8, {2}}};
  v1::ReportRequest w;
  ToWire(r, &w);
  EXPECT_TRUE(CheckLimits(w));
  auto back = FromWire(w);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->flash, r.flash);
  // An empty inventory is one; an older agent's report has none.
  r.flash = std::vector<FlashCopy>{};
  w.Clear();
  ToWire(r, &w);
  EXPECT_EQ(FromWire(w)->flash, std::vector<FlashCopy>{});
  v1::ReportRequest old;
  old.set_kind(v1::ReportRequest::KIND_STOPPED);
  ASSERT_TRUE(FromWire(old));
  EXPECT_FALSE(FromWire(old)->flash);
  // The join's limits, checked by the same code.
  for (size_t i = 0; i <= kMaxFlashCopies; ++i) w.add_flash()->set_group("x");
  auto s = CheckLimits(w);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("1025 copies"), std::string::npos) << s.error().message;
}

TEST(FlashWire, AnAssignmentCarriesTheDecisionOrSaysItHasNone) {
  NodeAssignment a;
  a.group_world_size = 3;
  a.restore_copy = 12;
  a.restore_shards = -1;
  a.replica_order = {2, 0};
  v1::Assignment w;
  ToWire(a, &w);
  NodeAssignment back = FromWire(w);
  EXPECT_EQ(back.restore_copy, 12);
  EXPECT_EQ(back.restore_shards, -1);
  EXPECT_EQ(back.replica_order, (std::vector<int>{2, 0}));
  // An older server sends neither: undecided, and the agent's own replica order.
  back = FromWire(v1::Assignment{});
  EXPECT_FALSE(back.restore_copy);
  EXPECT_FALSE(back.restore_shards);
  EXPECT_TRUE(back.replica_order.empty());
  // Ranks outside the round are dropped.
  w.add_replica_order(7);
  w.add_replica_order(-1);
  EXPECT_EQ(FromWire(w).replica_order, (std::vector<int>{2, 0}));
}

TEST(FlashWire, TheRunStartTravelsInTheJoinAndTheAssignment) {
  NodeInfo n;
  n.run_started_ms = 1764400000123;
  v1::NodeInfo wn;
  ToWire(n, &wn);
  EXPECT_EQ(FromWire(wn, "x").run_started_ms, 1764400000123);
  wn.set_run_started_ms(-5);  // before the epoch: unknown
  EXPECT_EQ(FromWire(wn, "x").run_started_ms, 0);
  NodeAssignment a;
  a.run_started_ms = 1764400000456;
  v1::Assignment wa;
  ToWire(a, &wa);
  EXPECT_EQ(FromWire(wa).run_started_ms, 1764400000456);
  wa.set_run_started_ms(-1);
  EXPECT_EQ(FromWire(wa).run_started_ms, 0);
  EXPECT_EQ(FromWire(v1::Assignment{}).run_started_ms, 0);  // an older server: unknown
}

}  // namespace
}  // namespace ftrun::rendezvous
