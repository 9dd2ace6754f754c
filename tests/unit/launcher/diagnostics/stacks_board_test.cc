// The rendezvous server's stack-dump orders (rendezvous/stacks_board.h).
#include "rendezvous/stacks_board.h"

#include <gtest/gtest.h>

namespace ftrun::testing {
namespace {

using rendezvous::RankStack;
using rendezvous::StacksBoard;
using namespace std::chrono_literals;

RankStack Stack(int rank, const std::string& host, size_t bytes = 10) {
  return RankStack{rank, host, 100 + rank, std::string(bytes, 'x'), "", ""};
}

TEST(StacksBoard, AnOrderIsCompleteOnceEveryMemberAnswered) {
  StacksBoard b;
  const auto t0 = rendezvous::Clock::now();
  auto [id, fresh] = b.Open({{"n0", "host0"}, {"n1", "host1"}}, t0);
  EXPECT_TRUE(fresh);
  auto c = b.Get(id);
  EXPECT_FALSE(c.complete);
  EXPECT_EQ(c.missing, (std::vector<std::string>{"host0", "host1"}));
  b.Answer("n1", id, {Stack(3, "host1"), Stack(2, "host1")});
  b.Answer("stranger", id, {Stack(9, "x")});    // not a member: ignored
  b.Answer("n0", id + 7, {Stack(0, "host0")});  // another order: ignored
  c = b.Get(0);
  EXPECT_EQ(c.id, id);
  EXPECT_EQ(c.missing, std::vector<std::string>{"host0"});
  b.Answer("n0", id, {Stack(1, "host0"), Stack(0, "host0")});
  c = b.Get(id);
  EXPECT_TRUE(c.complete);
  ASSERT_EQ(c.stacks.size(), 4u);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(c.stacks[r].rank, r) << "by rank";
}

TEST(StacksBoard, AYoungOrderIsReusedAndAnOldOneIsNot) {
  StacksBoard b;
  const auto t0 = rendezvous::Clock::now();
  auto first = b.Open({{"n0", "h"}}, t0).first;
  auto again = b.Open({{"n0", "h"}}, t0 + 2s);
  EXPECT_EQ(again.first, first);
  EXPECT_FALSE(again.second);
  auto later = b.Open({{"n0", "h"}}, t0 + 6s);
  EXPECT_TRUE(later.second);
  EXPECT_GT(later.first, first);
  EXPECT_EQ(b.Get(12345).id, 0u) << "an unknown order has nothing";
}

TEST(StacksBoard, ACollectionIsBoundedAndCountsWhatItLeftOut) {
  StacksBoard b;
  auto id = b.Open({{"n0", "h"}}, rendezvous::Clock::now()).first;
  std::vector<RankStack> many;
  for (int r = 0; r < 10; ++r) many.push_back(Stack(r, "h", 1000));
  b.Answer("n0", id, many);
  auto c = b.Get(id, 3500);
  EXPECT_EQ(c.stacks.size(), 3u);
  EXPECT_EQ(c.left_out, 7);
  EXPECT_TRUE(c.complete);
}

TEST(StacksBoard, OnlyTheLastFourOrdersAreKept) {
  StacksBoard b;
  auto t = rendezvous::Clock::now();
  uint64_t first = b.Open({}, t).first;
  for (int i = 1; i <= 4; ++i) b.Open({}, t + std::chrono::seconds(10 * i));
  EXPECT_EQ(b.Get(first).id, 0u);
  EXPECT_NE(b.Get(first + 1).id, 0u);
}

}  // namespace
}  // namespace ftrun::testing
