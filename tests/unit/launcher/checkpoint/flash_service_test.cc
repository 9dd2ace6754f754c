// FlashService answering snapshot requests: leases, commits, steps, gets and refusals.
#include <sys/mman.h>
#include <sys/stat.h>

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

// The lease mailbox: a lease asked for ahead of the next save is answered in shared memory
// (the request's id last), not with a message; a refusal is a "no" there, and the ordinary
// request that follows says why.
TEST_F(FlashServiceTest, ALeaseAskedForAheadIsAnsweredInTheMailbox) {
  v1::ControlSnapshotMailbox ask;
  ask.set_id(++id_);
  service().Mailbox(0, ask);
  const Sent handed = sent_.back();
  ASSERT_EQ(handed.type(), "snapshot_mailbox") << handed.error();
  ASSERT_GE(handed.fd, 0);
  const size_t bytes = static_cast<size_t>(handed.at("bytes").number_value());
  ASSERT_GE(bytes, 5 * sizeof(int64_t));
  void* page = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, handed.fd, 0);
  ASSERT_NE(page, MAP_FAILED);
  const auto* word = static_cast<const int64_t*>(page);
  EXPECT_EQ(word[0], 0) << "a new mailbox holds no answer";

  Save(0, 1, "one");
  const Sent lease_one = sent_[sent_.size() - 2];  // the buffer step 1 was written in
  const Sent first = Begin(0, 2, 16);
  ASSERT_EQ(first.type(), "snapshot_lease");
  ASSERT_EQ(::pwrite(first.fd, "two", 3, 0), 3);
  Commit(0, 2);

  const size_t before = sent_.size();
  v1::ControlSnapshotBegin ahead;
  ahead.set_id(++id_);
  ahead.set_step(3);
  ahead.set_bytes(5);
  ahead.set_mailbox(true);
  service().Begin(0, ahead);
  EXPECT_EQ(sent_.size(), before) << "no message: the answer is in the mailbox";
  EXPECT_EQ(word[0], ahead.id());
  EXPECT_EQ(word[1], 1) << "granted";
  EXPECT_EQ(word[2], 3) << "the step leased";
  struct stat one {};
  ASSERT_EQ(::fstat(lease_one.fd, &one), 0);
  EXPECT_EQ(word[3], static_cast<int64_t>(one.st_ino)) << "step 1's buffer, handed out again";
  EXPECT_EQ(word[4], one.st_size);
  ASSERT_EQ(::pwrite(lease_one.fd, "three", 5, 0), 5);
  Commit(0, 3);
  EXPECT_EQ(Get(0, 3), "three");
  EXPECT_EQ(Steps(0), (std::vector<int64_t>{3, 2}));

  // A refusal (over the budget) is a "no" in the mailbox, and nothing changes.
  ahead.set_id(++id_);
  ahead.set_step(4);
  ahead.set_bytes(static_cast<int64_t>(budget_) + 1);
  service().Begin(0, ahead);
  EXPECT_EQ(word[0], ahead.id());
  EXPECT_EQ(word[1], 0) << "refused";
  EXPECT_EQ(Steps(0), (std::vector<int64_t>{3, 2}));
  // Asked for again, the mailbox is cleared for the new worker (its ids start again).
  ask.set_id(++id_);
  service().Mailbox(0, ask);
  EXPECT_EQ(word[0], 0);
  ::munmap(page, bytes);
}

}  // namespace
}  // namespace ftrun::launcher
