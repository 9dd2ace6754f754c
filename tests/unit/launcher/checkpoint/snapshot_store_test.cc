#include "launcher/checkpoint/snapshot_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <climits>
#include <string>

#include "tests/unit/launcher/checkpoint/snapshot_test_util.h"

namespace ftrun::launcher {
namespace {

using testing::AsBytes;
using testing::Contents;
using testing::Save;
using testing::WriteThrough;

constexpr uint64_t kMiB = uint64_t{1} << 20;

std::string FdTarget(int fd) {
  char target[PATH_MAX] = {};
  EXPECT_GT(readlink(("/proc/self/fd/" + std::to_string(fd)).c_str(), target, sizeof target - 1),
            0);
  return target;
}

TEST(SnapshotStoreTest, ChecksumIsCrc32cAndChains) {
  // The CRC-32C check value: CRC-32C(b"123456789") == 0xe3069283; pieces chain.
  EXPECT_EQ(SnapshotChecksum(AsBytes("123456789")), 0xe3069283u);
  EXPECT_EQ(SnapshotChecksum(AsBytes("6789"), SnapshotChecksum(AsBytes("12345"))), 0xe3069283u);
}

TEST(SnapshotStoreTest, ACommittedSaveIsTheNewestSnapshot) {
  SnapshotStore store(2, 16 * kMiB);
  EXPECT_FALSE(store.Newest(0));
  int fd = Save(store, 1, 7, "state of step 7", R"({"w":[0,15]})");
  // A memfd: no name in /dev/shm or elsewhere, gone with the agent.
  EXPECT_EQ(FdTarget(fd).rfind("/memfd:ftrun-snapshot-1", 0), 0u) << FdTarget(fd);
  EXPECT_FALSE(store.Newest(0));
  auto view = store.Newest(1);
  ASSERT_TRUE(view);
  EXPECT_EQ(view->local_rank, 1);
  EXPECT_EQ(view->step, 7u);
  EXPECT_EQ(view->meta.layout, R"({"w":[0,15]})");
  EXPECT_EQ(Contents(*view), "state of step 7");
  EXPECT_EQ(view->fd(), fd);
  EXPECT_TRUE(Verify(*view));
}

TEST(SnapshotStoreTest, AWorkerDyingMidSaveLeavesThePreviousSnapshotWhole) {
  SnapshotStore store(1, 16 * kMiB);
  int first = Save(store, 0, 1, "step one");
  // Died after Begin, mid-copy: the agent aborts.
  auto lease = store.Begin(0, 2, 8);
  ASSERT_TRUE(lease);
  EXPECT_NE(lease->fd, first);
  WriteThrough(lease->fd, 0, "garbage!");
  store.Abort(0);
  EXPECT_FALSE(store.Commit(0, 2, {}));
  // Died again, and the next save begins without an Abort.
  ASSERT_TRUE(store.Begin(0, 3, 8));
  ASSERT_TRUE(store.Begin(0, 4, 8));
  auto stale = store.Commit(0, 3, {});
  ASSERT_FALSE(stale);
  EXPECT_EQ(stale.error().message,
            "commit of the memory snapshot of local rank 0 at step 3: no save of that step was "
            "begun");
  auto view = store.Newest(0);
  ASSERT_TRUE(view);
  EXPECT_EQ(view->step, 1u);
  EXPECT_EQ(Contents(*view), "step one");
  EXPECT_TRUE(Verify(*view));
}

TEST(SnapshotStoreTest, BuffersAreReusedFromSaveToSave) {
  SnapshotStore store(1, 16 * kMiB);
  int a = Save(store, 0, 1, std::string(1000, 'a'));
  int b = Save(store, 0, 2, std::string(1000, 'b'));
  EXPECT_NE(a, b);
  EXPECT_EQ(Save(store, 0, 3, std::string(10, 'c')), a);  // smaller: kept as it is
  EXPECT_EQ(store.reserved_bytes(), 2000u);
  EXPECT_EQ(Save(store, 0, 4, std::string(3000, 'd')), b);  // larger: grown in place
  EXPECT_EQ(store.reserved_bytes(), 4000u);
  auto view = store.Newest(0);
  ASSERT_TRUE(view);
  EXPECT_EQ(Contents(*view), std::string(3000, 'd'));
  EXPECT_EQ(Save(store, 0, 5, std::string(5, 'e')), a);
  EXPECT_EQ(Contents(*store.Newest(0)), "eeeee");
}

TEST(SnapshotStoreTest, AStateBeyondTheBudgetIsAClearErrorAndChangesNothing) {
  SnapshotStore store(2, 1 * kMiB);
  Save(store, 0, 1, std::string(600 * 1024, 'x'));
  auto lease = store.Begin(1, 1, 600 * 1024);
  ASSERT_FALSE(lease);
  EXPECT_EQ(lease.error().message,
            "memory snapshot of local rank 1 at step 1: 614400 bytes do not fit in the flash "
            "checkpoint memory budget of 1048576 bytes (614400 bytes already hold other "
            "snapshots); raise --flash-memory-budget (FTRUN_FLASH_MEMORY_BUDGET)");
  EXPECT_EQ(store.reserved_bytes(), 600u * 1024);
  EXPECT_FALSE(store.Newest(1));
  EXPECT_FALSE(store.Commit(1, 1, {}));
  // The same for a rank that has a snapshot: it is kept.
  ASSERT_FALSE(store.Begin(0, 2, 2 * kMiB));
  EXPECT_EQ(store.Newest(0)->step, 1u);
  EXPECT_TRUE(Verify(*store.Newest(0)));
  EXPECT_EQ(store.reserved_bytes(), 600u * 1024);
}

TEST(SnapshotStoreTest, BadRequestsAreErrors) {
  SnapshotStore store(1, kMiB);
  EXPECT_EQ(store.Begin(1, 1, 10).error().message,
            "memory snapshot of local rank 1 at step 1: no such local rank (this node has 1)");
  EXPECT_EQ(store.Begin(0, 1, 0).error().message,
            "memory snapshot of local rank 0 at step 1: a snapshot needs at least one byte");
  EXPECT_FALSE(store.Commit(-1, 1, {}));
  EXPECT_FALSE(store.Newest(5));
}

TEST(SnapshotStoreTest, VerifyFindsACorruptByte) {
  SnapshotStore store(1, kMiB);
  int fd = Save(store, 0, 9, testing::Pattern(100000, 'p'));
  WriteThrough(fd, 4242, "?");  // a stray write through a descriptor the worker kept
  auto view = store.Newest(0);
  ASSERT_TRUE(view);
  auto verified = Verify(*view);
  ASSERT_FALSE(verified);
  EXPECT_NE(verified.error().message.find("the snapshot of local rank 0 at step 9 has checksum"),
            std::string::npos)
      << verified.error().message;
}

// A persist pins the older buffer while the worker keeps saving: the save that would
// overwrite it takes a spare buffer instead (it was refused, and a kill then lost that step).
TEST(SnapshotStoreTest, ASaveWhileABufferIsBeingReadTakesASpareAndTheReaderKeepsItsBytes) {
  SnapshotStore store(1, kMiB);
  Save(store, 0, 1, "one");
  auto reading = store.Newest(0);  // e.g. being persisted
  Save(store, 0, 2, "two");
  const uint64_t two_buffers = store.reserved_bytes();
  EXPECT_FALSE(store.Busy(0, 5));
  Save(store, 0, 3, "three");
  EXPECT_EQ(Contents(*reading), "one");
  EXPECT_EQ(Contents(*store.Newest(0)), "three");
  {
    auto complete = store.Complete(0);
    ASSERT_EQ(complete.size(), 2u);
    EXPECT_EQ(Contents(complete[1]), "two");
  }
  EXPECT_GT(store.reserved_bytes(), two_buffers);
  Save(store, 0, 4, "four");  // over "two": read by nobody
  EXPECT_EQ(Contents(*reading), "one");
  const uint64_t three_buffers = store.reserved_bytes();
  // The set-aside buffer, read no more, is the spare of the next such save: no new memory.
  reading.reset();
  auto again = store.Newest(0);  // four
  Save(store, 0, 5, "five");
  Save(store, 0, 6, "six");
  EXPECT_EQ(Contents(*again), "four");
  EXPECT_EQ(Contents(*store.Newest(0)), "six");
  EXPECT_EQ(store.reserved_bytes(), three_buffers);
}

TEST(SnapshotStoreTest, ABufferBeingReadWithNoRoomForASpareIsNotHandedToASave) {
  SnapshotStore store(1, 10000);
  Save(store, 0, 1, testing::Pattern(4000, 'a'));
  auto reading = store.Newest(0);
  Save(store, 0, 2, testing::Pattern(4000, 'b'));
  EXPECT_TRUE(store.Busy(0, 4000));
  auto lease = store.Begin(0, 3, 4000);
  ASSERT_FALSE(lease);
  EXPECT_EQ(lease.error().message,
            "memory snapshot of local rank 0 at step 3: its buffer still holds step 1, which is "
            "being read (persisted or copied), and a spare buffer of 4000 bytes does not fit in "
            "the flash checkpoint memory budget of 10000 bytes; try the next save");
  EXPECT_EQ(Contents(*reading), testing::Pattern(4000, 'a'));
  EXPECT_EQ(Contents(*store.Newest(0)), testing::Pattern(4000, 'b'));
  EXPECT_EQ(store.reserved_bytes(), 8000u);
  reading.reset();
  EXPECT_FALSE(store.Busy(0, 4000));
  EXPECT_TRUE(store.Begin(0, 3, 4000));
}

TEST(SnapshotStoreTest, AViewOutlivesTheStore) {
  std::optional<SnapshotView> view;
  {
    SnapshotStore store(1, kMiB);
    Save(store, 0, 1, "kept");
    view = store.Newest(0);
  }
  EXPECT_EQ(Contents(*view), "kept");
  EXPECT_TRUE(Verify(*view));
}

}  // namespace
}  // namespace ftrun::launcher
