// Which of torch's store-based barrier polls the agent's store holds until the last rank.
#include "store/barrier_poll.h"

#include <gtest/gtest.h>

namespace ftrun::store {
namespace {

Request Poll(const std::string& key, int64_t delta = 0) {
  Request r;
  r.type = Query::kAdd;
  r.keys = {key};
  r.delta = delta;
  return r;
}

TEST(BarrierPoll, KnowsTorchsBarrierKeysAndNothingElse) {
  EXPECT_TRUE(IsBarrierKey("/default_pg/store_based_barrier_key:1"));
  EXPECT_TRUE(IsBarrierKey("default_pg//store_based_barrier_key:12"));
  EXPECT_FALSE(IsBarrierKey("/default_pg/store_based_barrier_key:"));
  EXPECT_FALSE(IsBarrierKey("/default_pg/store_based_barrier_key:1a"));
  EXPECT_FALSE(IsBarrierKey("/default_pg/other_key:1"));
  EXPECT_FALSE(IsBarrierKey(""));
}

TEST(BarrierPoll, HoldsAPollThatWouldReadFewerRanksThanTheWorld) {
  KvStore kv;
  const std::string key = "/pg/store_based_barrier_key:1";
  ASSERT_TRUE(kv.Add(key, 3).has_value());
  EXPECT_TRUE(ShouldHoldBarrierPoll(kv, Poll(key), 4));
  EXPECT_FALSE(BarrierComplete(kv, key, 4));
  ASSERT_TRUE(kv.Add(key, 1).has_value());
  EXPECT_FALSE(ShouldHoldBarrierPoll(kv, Poll(key), 4)) << "every rank is there";
  EXPECT_TRUE(BarrierComplete(kv, key, 4));
}

TEST(BarrierPoll, NeverHoldsWhatItDoesNotUnderstand) {
  KvStore kv;
  const std::string key = "/pg/store_based_barrier_key:1";
  ASSERT_TRUE(kv.Add(key, 1).has_value());
  EXPECT_FALSE(ShouldHoldBarrierPoll(kv, Poll(key), 0)) << "world size unknown";
  EXPECT_FALSE(ShouldHoldBarrierPoll(kv, Poll(key, 1), 4)) << "an arrival, not a poll";
  EXPECT_FALSE(ShouldHoldBarrierPoll(kv, Poll("/pg/store_based_barrier_key:2"), 4)) << "unset";
  Request set = Poll(key);
  set.type = Query::kSet;
  EXPECT_FALSE(ShouldHoldBarrierPoll(kv, set, 4));
  ASSERT_TRUE(kv.Set("/pg/store_based_barrier_key:3", "-1"));
  EXPECT_FALSE(ShouldHoldBarrierPoll(kv, Poll("/pg/store_based_barrier_key:3"), 4));
  ASSERT_TRUE(kv.Set("/pg/store_based_barrier_key:4", std::string(19, '9')));
  EXPECT_FALSE(BarrierCount(kv, "/pg/store_based_barrier_key:4").has_value()) << "too long";
  EXPECT_FALSE(ShouldHoldBarrierPoll(kv, Request{Query::kAdd, {}, "", "", 0}, 4));
}

}  // namespace
}  // namespace ftrun::store
