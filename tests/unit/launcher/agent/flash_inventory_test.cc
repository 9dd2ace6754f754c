// FlashInventory: what an agent reports to the rendezvous it holds in memory: its local
// ranks' complete snapshots per copy (with their world size) and the replicas it keeps.
#include "launcher/agent/flash_inventory.h"

#include <gtest/gtest.h>

#include <cstring>

#include "tests/unit/launcher/checkpoint/snapshot_test_util.h"

namespace ftrun::launcher {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

void Save(SnapshotStore& store, int local_rank, uint64_t step, const std::string& group,
          int world_size) {
  ASSERT_TRUE(store.Begin(local_rank, step, 8));
  SnapshotMeta meta;
  meta.group = group;
  meta.target.world_size = world_size;
  ASSERT_TRUE(store.Commit(local_rank, step, meta));
}

void Arrive(ReplicaStore& store, const std::string& group, uint64_t step) {
  const std::string content = "a shard";
  auto w = store.Begin(group, step, content.size(), "peer");
  ASSERT_TRUE(w);
  std::memcpy(w->data().data(), content.data(), content.size());
  const uint32_t sum = SnapshotChecksum(testing::AsBytes(content));
  ASSERT_TRUE(store.Finish(w->id, sum, sum));
}

TEST(FlashInventoryTest, ListsEachCopysCompleteStepsNewestFirstWithTheReplicas) {
  SnapshotStore snapshots(2, 16 * kMiB);
  ReplicaStore replicas(16 * kMiB);
  EXPECT_TRUE(FlashInventory(snapshots, &replicas).empty());
  Save(snapshots, 0, 4, "rank-0", 4);
  Save(snapshots, 0, 5, "rank-0", 4);
  Save(snapshots, 1, 5, "rank-1", 4);
  ASSERT_TRUE(snapshots.Begin(1, 6, 8));  // begun, not committed: not held
  Arrive(replicas, "rank-2", 5);
  Arrive(replicas, "rank-2", 6);
  const std::vector<rendezvous::FlashCopy> want = {
      {"rank-0", 4, {5, 4}}, {"rank-1", 4, {5}}, {"rank-2", 0, {6, 5}}};
  EXPECT_EQ(FlashInventory(snapshots, &replicas), want);
  EXPECT_EQ(FlashInventory(snapshots, nullptr).size(), 2u);
}

}  // namespace
}  // namespace ftrun::launcher
