// FlashService answering snapshot requests: leases, commits, steps, gets and refusals.
#include <filesystem>
#include <string>
#include <vector>

#include "tests/unit/launcher/checkpoint/flash_service_fixture.h"

namespace ftrun::launcher {
namespace {

using testing::FlashServiceTest;

TEST_F(FlashServiceTest, ASaveIsListedAndHandedBackThroughADescriptor) {
  const Sent& lease = Begin(0, 7, 11);
  EXPECT_EQ(lease.type(), "snapshot_lease");
  EXPECT_EQ(lease.at("id").number_value(), 1);
  EXPECT_EQ(lease.at("step").number_value(), 7);
  EXPECT_EQ(lease.at("bytes").number_value(), 11);
  EXPECT_TRUE(lease.flag("fd"));
  ASSERT_GE(lease.fd, 0);
  ASSERT_EQ(::pwrite(lease.fd, "hello flash", 11, 0), 11);
  EXPECT_TRUE(Steps(0).empty()) << "listed before its commit";
  const Sent& committed = Commit(0, 7);
  EXPECT_EQ(committed.type(), "snapshot_committed");
  EXPECT_TRUE(committed.flag("ok")) << committed.error();
  EXPECT_EQ(Steps(0), std::vector<int64_t>{7});
  EXPECT_EQ(Get(0, 7), "hello flash");
  EXPECT_EQ(sent_.back().local_rank, 0);
  EXPECT_EQ(service().persists_in_flight(), 0) << "no root: nothing to store";
}

TEST_F(FlashServiceTest, TheOlderSnapshotStaysUntilItsBufferIsHandedOut) {
  Save(0, 1, "one");
  Save(0, 2, "two");
  EXPECT_EQ(Steps(0), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(Get(0, 1), "one");
  const Sent& lease = Begin(0, 3, 5);
  ASSERT_EQ(lease.type(), "snapshot_lease");
  ASSERT_EQ(::pwrite(lease.fd, "three", 5, 0), 5);
  EXPECT_EQ(Steps(0), std::vector<int64_t>{2}) << "step 1's buffer is being overwritten";
  EXPECT_EQ(Get(0, 1).rfind("refused: no complete snapshot of step 1", 0), 0u);
  ASSERT_TRUE(Commit(0, 3).flag("ok"));
  EXPECT_EQ(Steps(0), (std::vector<int64_t>{3, 2}));
  // The worker dies mid-save: step 3 stays the newest, whole and listed.
  ASSERT_EQ(Begin(0, 4, 4).type(), "snapshot_lease");
  service().WorkerExited(0);
  EXPECT_EQ(Steps(0), std::vector<int64_t>{3});
  EXPECT_EQ(Get(0, 3), "three");
  const Sent& late = Commit(0, 4);
  EXPECT_FALSE(late.flag("ok"));
  EXPECT_NE(late.error().find("no save of that step was begun"), std::string::npos) << late.error();
}

TEST_F(FlashServiceTest, AShardIsFoundByItsRankNotItsLocalSlot) {
  Save(0, 4, "shard of rank 1", "rank-1");
  EXPECT_EQ(Steps(1, "rank-1"), std::vector<int64_t>{4});
  EXPECT_TRUE(Steps(1, "rank-0").empty());
  EXPECT_TRUE(Steps(1).empty());
  EXPECT_EQ(Get(1, 4, "rank-1"), "shard of rank 1");
  EXPECT_EQ(sent_.back().local_rank, 1);
  EXPECT_EQ(Get(1, 4, "rank-0").rfind("refused: ", 0), 0u);
}

TEST_F(FlashServiceTest, ASaveOverTheBudgetIsRefusedNamingTheOption) {
  budget_ = 1 << 20;
  const Sent& refused = Begin(0, 1, 2 << 20);
  EXPECT_EQ(refused.type(), "snapshot_refused");
  EXPECT_EQ(refused.fd, -1);
  EXPECT_FALSE(refused.flag("busy"));
  EXPECT_NE(refused.error().find("--flash-memory-budget"), std::string::npos) << refused.error();
  EXPECT_NE(refused.error().find("FTRUN_FLASH_MEMORY_BUDGET"), std::string::npos);
  EXPECT_TRUE(Steps(0).empty());
  EXPECT_EQ(service().store().reserved_bytes(), 0u);
}

TEST_F(FlashServiceTest, ALeaseThatCannotBeDeliveredIsAbandoned) {
  Save(0, 1, "one");
  connected_ = false;
  Begin(0, 2, 3);
  connected_ = true;
  EXPECT_FALSE(Commit(0, 2).flag("ok"));
  EXPECT_EQ(Steps(0), std::vector<int64_t>{1});
}

TEST_F(FlashServiceTest, BadRequestsAreRefusedWithAReason) {
  const Sent& negative = Begin(0, -1, 10);
  EXPECT_EQ(negative.type(), "snapshot_refused");
  EXPECT_NE(negative.error().find("step >= 0"), std::string::npos) << negative.error();
  const Sent& empty = Begin(0, 1, 0);
  EXPECT_EQ(empty.type(), "snapshot_refused");
  EXPECT_NE(empty.error().find("at least one byte"), std::string::npos) << empty.error();
  const Sent& missing = GetAnswer(1, 9, "rank-3");
  EXPECT_EQ(missing.type(), "snapshot_refused");
  EXPECT_EQ(missing.at("id").number_value(), static_cast<double>(id_));
  EXPECT_EQ(missing.error(), "no complete snapshot of step 9 of copy 'rank-3' on this node");
  EXPECT_EQ(GetAnswer(0, -2).type(), "snapshot_refused");
  const Sent& unbegun = Commit(1, 5);
  EXPECT_EQ(unbegun.type(), "snapshot_committed");
  EXPECT_FALSE(unbegun.flag("ok"));
  EXPECT_NE(unbegun.error().find("no save of that step was begun"), std::string::npos);
  EXPECT_FALSE(Commit(1, -5).flag("ok"));
  EXPECT_TRUE(Steps(0).empty());
  EXPECT_TRUE(Steps(1).empty());
}

// The one copy of a DDP job asks for its next buffer right after a commit, before it knows
// the step it will save: the commit names both the step saved and the step the lease named.
TEST_F(FlashServiceTest, ALeaseTakenAheadIsCommittedUnderTheStepSaved) {
  Save(0, 1, "one");
  const Sent& ahead = Begin(0, 2, 16);
  ASSERT_EQ(ahead.type(), "snapshot_lease");
  ASSERT_EQ(::pwrite(ahead.fd, "seven", 5, 0), 5);
  auto commit = [&](int64_t step, int64_t begun, int64_t bytes) {
    v1::ControlSnapshotCommit r;
    r.set_id(++id_);
    r.set_step(step);
    r.set_begun(begun);
    r.set_bytes(bytes);
    service().Commit(0, r);
    return sent_.back();
  };
  const Sent wrong_lease = commit(7, 3, 5);
  EXPECT_FALSE(wrong_lease.flag("ok"));
  EXPECT_NE(wrong_lease.error().find("no save of that step was begun"), std::string::npos);
  const Sent too_big = commit(7, 2, 17);
  EXPECT_FALSE(too_big.flag("ok"));
  EXPECT_NE(too_big.error().find("17 bytes in a lease of 16"), std::string::npos)
      << too_big.error();
  ASSERT_TRUE(commit(7, 2, 5).flag("ok"));
  EXPECT_EQ(Steps(0), (std::vector<int64_t>{7, 1}));
  EXPECT_EQ(Get(0, 7), "seven");
  EXPECT_EQ(service().store().Newest(0)->bytes, 5u);
}

}  // namespace
}  // namespace ftrun::launcher
