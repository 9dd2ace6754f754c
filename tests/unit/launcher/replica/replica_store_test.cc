#include "launcher/replica/replica_store.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "launcher/checkpoint/snapshot_store.h"
#include "tests/unit/launcher/checkpoint/snapshot_test_util.h"

namespace ftrun::launcher {
namespace {

using testing::AsBytes;

constexpr uint64_t kMiB = uint64_t{1} << 20;

// A whole copy of `content` arriving for `group` at `step`; the store's verdict.
Status Arrive(ReplicaStore& store, const std::string& group, uint64_t step,
              const std::string& content, bool corrupt = false) {
  auto w = store.Begin(group, step, content.size(), "peer-a");
  if (!w) return w.error();
  std::memcpy(w->data().data(), content.data(), content.size());
  uint32_t sent = SnapshotChecksum(AsBytes(content));
  if (corrupt) w->data()[0] = static_cast<std::byte>(~static_cast<unsigned char>(content[0]));
  uint32_t received = SnapshotChecksum(w->data());
  return store.Finish(w->id, sent, received);
}

std::string Bytes(const ReplicaView& v) {
  return std::string(reinterpret_cast<const char*>(v.data().data()), v.bytes);
}

TEST(ReplicaStoreTest, ACompleteCopyIsTheGroupsNewestReplica) {
  ReplicaStore store(16 * kMiB);
  EXPECT_TRUE(store.Complete("rank-2").empty());
  ASSERT_TRUE(Arrive(store, "rank-2", 5, "shard of step 5"));
  auto views = store.Complete("rank-2");
  ASSERT_EQ(views.size(), 1u);
  EXPECT_EQ(views[0].step, 5u);
  EXPECT_EQ(views[0].from, "peer-a");
  EXPECT_EQ(Bytes(views[0]), "shard of step 5");
  EXPECT_TRUE(store.Complete("rank-3").empty());
  // The next copy goes to the other buffer: both complete, newest first.
  ASSERT_TRUE(Arrive(store, "rank-2", 6, "shard of step 6"));
  views = store.Complete("rank-2");
  ASSERT_EQ(views.size(), 2u);
  EXPECT_EQ(views[0].step, 6u);
  EXPECT_EQ(views[1].step, 5u);
  EXPECT_EQ(Bytes(views[1]), "shard of step 5");
}

TEST(ReplicaStoreTest, ASenderGoneMidCopyLeavesThePreviousReplicaIntact) {
  ReplicaStore store(16 * kMiB);
  ASSERT_TRUE(Arrive(store, "rank-0", 1, "complete one"));
  ASSERT_TRUE(Arrive(store, "rank-0", 2, "complete two"));
  auto w = store.Begin("rank-0", 3, 12, "peer-a");
  ASSERT_TRUE(w);
  std::memcpy(w->data().data(), "half", 4);
  store.Abort(w->id);
  w->buffer.reset();  // the receiving thread lets go of it
  auto views = store.Complete("rank-0");
  ASSERT_FALSE(views.empty());
  EXPECT_EQ(views[0].step, 2u);
  EXPECT_EQ(Bytes(views[0]), "complete two");
  // And the group takes copies again.
  ASSERT_TRUE(Arrive(store, "rank-0", 4, "complete 4"));
  EXPECT_EQ(store.Complete("rank-0")[0].step, 4u);
}

TEST(ReplicaStoreTest, ACopyWithTheWrongChecksumIsRefusedAndNotKept) {
  ReplicaStore store(16 * kMiB);
  ASSERT_TRUE(Arrive(store, "rank-1", 7, "good seven"));
  Status bad = Arrive(store, "rank-1", 8, "bad eight!", /*corrupt=*/true);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("checksum"), std::string::npos) << bad.error().message;
  EXPECT_NE(bad.error().message.find("rank-1"), std::string::npos);
  auto views = store.Complete("rank-1");
  ASSERT_EQ(views.size(), 1u);
  EXPECT_EQ(views[0].step, 7u);
  EXPECT_EQ(Bytes(views[0]), "good seven");
}

TEST(ReplicaStoreTest, ACopyOverTheBudgetIsRefusedWholeNamingTheOption) {
  ReplicaStore store(kMiB);
  ASSERT_TRUE(Arrive(store, "rank-0", 1, std::string(600 * 1024, 'a')));
  auto w = store.Begin("rank-1", 1, 600 * 1024, "peer-b");
  ASSERT_FALSE(w);
  EXPECT_NE(w.error().message.find("--flash-memory-budget"), std::string::npos)
      << w.error().message;
  EXPECT_EQ(store.reserved_bytes(), 600u * 1024);
  EXPECT_TRUE(store.Complete("rank-1").empty());
  // The same group's own other buffer does not fit either: the complete replica stays.
  EXPECT_FALSE(store.Begin("rank-0", 2, 600 * 1024, "peer-a"));
  EXPECT_EQ(store.Complete("rank-0")[0].step, 1u);
}

TEST(ReplicaStoreTest, OneCopyOfAGroupAtATime) {
  ReplicaStore store(16 * kMiB);
  auto first = store.Begin("rank-4", 1, 10, "peer-a");
  ASSERT_TRUE(first);
  auto second = store.Begin("rank-4", 2, 10, "peer-a");
  ASSERT_FALSE(second);
  EXPECT_NE(second.error().message.find("already arriving"), std::string::npos);
  // Another group is independent.
  EXPECT_TRUE(store.Begin("rank-5", 1, 10, "peer-a"));
  // A stale id finishes nothing.
  EXPECT_FALSE(store.Finish(first->id + 100, 0, 0));
}

TEST(ReplicaStoreTest, AReplicaBeingReadIsNotOverwritten) {
  ReplicaStore store(16 * kMiB);
  ASSERT_TRUE(Arrive(store, "rank-0", 1, "one"));
  ASSERT_TRUE(Arrive(store, "rank-0", 2, "two"));
  auto older = store.Complete("rank-0")[1];  // a reader holds step 1's buffer
  auto w = store.Begin("rank-0", 3, 3, "peer-a");
  ASSERT_FALSE(w);
  EXPECT_NE(w.error().message.find("being read"), std::string::npos);
  older = {};
  EXPECT_TRUE(Arrive(store, "rank-0", 3, "333"));
}

}  // namespace
}  // namespace ftrun::launcher
