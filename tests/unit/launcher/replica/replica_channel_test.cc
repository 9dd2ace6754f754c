// Two agents' replica services on loopback, real gRPC, one real loop thread: a shard
// snapshot is copied, forged or broken copies are refused, and a receiver that disappears
// mid-copy costs the sender nothing but a log line. Each test runs twice: with the copies on
// the direct path (Direct) and streamed over gRPC, as a TLS job's are (Stream).
#include "tests/unit/launcher/replica/replica_channel_fixture.h"

namespace ftrun::launcher::replica_testing {
namespace {

class ReplicaChannelPathTest : public ReplicaChannelTest,
                               public ::testing::WithParamInterface<bool> {
 protected:
  ReplicaChannelPathTest() { direct_ = GetParam(); }
};
INSTANTIATE_TEST_SUITE_P(Paths, ReplicaChannelPathTest, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "Direct" : "Stream"; });

TEST_P(ReplicaChannelPathTest, AShardSnapshotIsCopiedToTheNextNode) {
  a_ = Service("node-a");
  b_ = Service("node-b");
  Round(*a_, *b_);
  const std::string content = Pattern(9 * kMiB + 123, 'x');  // three chunks
  auto view = Snapshot(4, content);
  view.meta.target.name = "model_optim_rng.pt";  // the file name the rank gave its shard
  view.meta.target.part_link = "/ckpt/iter_0000004/mp_rank_00";  // and its own link
  OnLoop([&] {
    a_->Committed(view);
    return true;
  });
  ASSERT_TRUE(WaitForStep(*b_, "rank-0", 4));
  auto replica = *Newest(*b_, "rank-0");
  EXPECT_EQ(replica.from, "node-a");
  EXPECT_EQ(replica.name, "model_optim_rng.pt");
  EXPECT_EQ(replica.part_link, "/ckpt/iter_0000004/mp_rank_00");
  ASSERT_EQ(replica.bytes, content.size());
  EXPECT_EQ(std::memcmp(replica.data().data(), content.data(), content.size()), 0);
  ASSERT_TRUE(WaitFor([&] { return !Copies().empty(); }, 10s));
  EXPECT_EQ(Copies().front(), "rank-0@4 ok");
  // It came on the path under test (counted before the receiver answered the sender).
  EXPECT_EQ(b_->server().direct_copies(), GetParam() ? 1u : 0u);
  // A DDP copy ("" group) is not sent: every node restores it from any other already.
  auto ddp = Snapshot(5, "ddp", "");
  OnLoop([&] {
    a_->Committed(ddp);
    return true;
  });
  EXPECT_FALSE(WaitFor([&] { return Copies().size() > 1; }, 300ms));
}

TEST_P(ReplicaChannelPathTest, NewestWinsWhileACopyIsInFlight) {
  a_ = Service("node-a");
  b_ = Service("node-b");
  Round(*a_, *b_);
  // Six commits of one shard while the first (large) copy is in flight: steps 2..5 are
  // replaced by 6 before they are sent, so at most two copies go out, the last one step 6.
  SnapshotStore many(6, 512 * kMiB);
  std::vector<SnapshotView> views;
  for (int step = 1; step <= 6; ++step) {
    Save(many, step - 1, static_cast<uint64_t>(step),
         step == 1 ? Pattern(256 * kMiB, 'l') : Pattern(kMiB, static_cast<char>(step)));
    views.push_back(*many.Newest(step - 1));
    views.back().meta.group = "rank-0";
  }
  OnLoop([&] {
    for (const auto& view : views) a_->Committed(view);
    return true;
  });
  ASSERT_TRUE(WaitForStep(*b_, "rank-0", 6));
  ASSERT_TRUE(WaitFor([&] { return !Copies().empty() && Copies().back() == "rank-0@6 ok"; }, 10s));
  EXPECT_LE(Copies().size(), 2u) << "old snapshots were queued, not replaced";
}

TEST_P(ReplicaChannelPathTest, ASnapshotOverwrittenDuringItsCopyIsNotStoredAndSavesAreNotRefused) {
  a_ = Service("node-a");
  b_ = Service("node-b");
  Round(*a_, *b_);
  SnapshotStore local(1, 64 * kMiB);
  Save(local, 0, 1, "step one");
  Save(local, 0, 2, "step two");
  // Step 1's buffer was handed out again after this view of it was taken (its generation
  // moved on): a worker may be writing into it.
  auto one = local.Complete(0)[1];
  one.meta.group = "rank-0";
  one.generation -= 1;
  auto two = *local.Newest(0);
  two.meta.group = "rank-0";
  OnLoop([&] {
    a_->Committed(one);
    a_->Committed(two);
    return true;
  });
  one = {};
  two = {};
  // Copies pending or in flight do not pin the buffers: the worker's next save is not refused.
  auto lease = local.Begin(0, 3, 9);
  ASSERT_TRUE(lease) << lease.error().message;
  ASSERT_TRUE(WaitForStep(*b_, "rank-0", 2));
  // Step 1's copy was cancelled before its last message: only step 2 ever arrived.
  auto views = OnLoop([&] { return b_->store().Complete("rank-0"); });
  EXPECT_EQ(views.size(), 1u);
  ASSERT_TRUE(WaitFor([&] { return !Copies().empty(); }, 10s));
  EXPECT_EQ(Copies(), std::vector<std::string>{"rank-0@2 ok"});
}

TEST_P(ReplicaChannelPathTest, TheCommitChecksumIsSentSoBytesChangedSinceAreRefused) {
  a_ = Service("node-a");
  b_ = Service("node-b");
  Round(*a_, *b_);
  const std::string content = Pattern(3 * kMiB, 'c');
  const int fd = Save(snapshots_, 0, 6, content);  // its commit checksum: of `content`
  auto view = *snapshots_.Newest(0);
  view.meta.group = "rank-0";
  testing::WriteThrough(fd, kMiB, "!");  // changed in memory after the commit
  OnLoop([&] {
    a_->Committed(view);
    return true;
  });
  ASSERT_TRUE(WaitFor([&] { return !Copies().empty(); }, 20s));
  EXPECT_EQ(Copies().front(), "rank-0@6 failed");
  EXPECT_FALSE(Newest(*b_, "rank-0")) << "the receiver kept a corrupt copy";
}

TEST_P(ReplicaChannelPathTest, ACopyWaitsForACommitChecksumStillBeingComputed) {
  a_ = Service("node-a");
  b_ = Service("node-b");
  Round(*a_, *b_);
  const std::string content = Pattern(2 * kMiB, 'w');
  auto view = Snapshot(7, content);
  view.meta.checksum = CommitChecksum::Pending();
  OnLoop([&] {
    a_->Committed(view);
    return true;
  });
  EXPECT_FALSE(WaitFor([&] { return !Copies().empty(); }, 300ms)) << "sent without a checksum";
  view.meta.checksum.Settle(SnapshotChecksum(testing::AsBytes(content)));
  ASSERT_TRUE(WaitForStep(*b_, "rank-0", 7));
  ASSERT_TRUE(WaitFor([&] { return !Copies().empty(); }, 10s));
  EXPECT_EQ(Copies().front(), "rank-0@7 ok");
}

TEST_P(ReplicaChannelPathTest, ACopyWithoutTheJobsKeyIsRefusedAndStoresNothing) {
  b_ = Service("node-b");
  a_ = Service("node-a");
  Round(*a_, *b_);
  const int port = b_->server().port();
  EXPECT_EQ(RawPush(port, "forged-key-forged-key-forged-key", "evil", true).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(RawPush(port, "", "evil", true).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_FALSE(Newest(*b_, "rank-0"));
  // The right key (a member of the round) is accepted.
  EXPECT_TRUE(RawPush(port, kKey, "good", true).ok());
  EXPECT_EQ(Newest(*b_, "rank-0")->step, 99u);
}

TEST_P(ReplicaChannelPathTest, ACopyNamingItsShardFileOutsideItsDirectoryIsRefused) {
  b_ = Service("node-b");
  a_ = Service("node-a");
  Round(*a_, *b_);
  const int port = b_->server().port();
  for (const std::string name : {"../evil.pt", "PART.json", "a/b.pt", ".."}) {
    auto refused = RawPush(port, kKey, "evil", true, 0, std::nullopt, name);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << name;
    EXPECT_NE(refused.error_message().find("file name"), std::string::npos)
        << refused.error_message();
  }
  // Its own link too: absolute, no control characters, at most 4096 bytes.
  for (const std::string& link :
       std::vector<std::string>{"relative/mp_rank_00", "/a\nb", "/" + std::string(4096, 'x')}) {
    auto refused = RawPush(port, kKey, "evil", true, 0, std::nullopt, "shard.pt", link);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << link;
  }
  EXPECT_FALSE(Newest(*b_, "rank-0"));
  EXPECT_TRUE(RawPush(port, kKey, "good", true, 0, std::nullopt, "shard.pt").ok());
  EXPECT_EQ(Newest(*b_, "rank-0")->name, "shard.pt");
}

TEST_P(ReplicaChannelPathTest, ABrokenCopyLeavesThePreviousReplica) {
  b_ = Service("node-b");
  a_ = Service("node-a");
  Round(*a_, *b_);
  const int port = b_->server().port();
  ASSERT_TRUE(RawPush(port, kKey, "complete", true).ok());
  // The sender goes away mid-copy, then one sends fewer bytes than announced.
  EXPECT_FALSE(RawPush(port, kKey, "half", false, 100).ok());
  // (Until the receiver has seen the first sender go, the group is still busy with it.)
  grpc::StatusCode code{};
  ASSERT_TRUE(WaitFor(
      [&] {
        code = RawPush(port, kKey, "short", true, 100).error_code();
        return code != grpc::StatusCode::RESOURCE_EXHAUSTED;
      },
      10s));
  EXPECT_EQ(code, grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(NewestBytes(*b_, "rank-0"), "complete");
  // The group is not left blocked by the broken copies.
  ASSERT_TRUE(WaitFor([&] { return RawPush(port, kKey, "again", true).ok(); }, 10s));
}

TEST_P(ReplicaChannelPathTest, ACopyWhoseChecksumDiffersIsRefusedAndThePreviousReplicaKept) {
  b_ = Service("node-b");
  a_ = Service("node-a");
  Round(*a_, *b_);
  const int port = b_->server().port();
  ASSERT_TRUE(RawPush(port, kKey, "complete", true).ok());
  const std::string other = "altered!";
  auto refused = RawPush(port, kKey, other, true, 0, Crc32c(testing::AsBytes(other)) ^ 1);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(refused.error_message().find("checksum"), std::string::npos) << refused.error_message();
  EXPECT_EQ(NewestBytes(*b_, "rank-0"), "complete");
}

TEST_P(ReplicaChannelPathTest, ACopyOverTheReceiversBudgetIsRefusedWholeAndTheSenderGoesOn) {
  a_ = Service("node-a");
  b_ = Service("node-b", kMiB);
  Round(*a_, *b_);
  auto big = Snapshot(1, Pattern(2 * kMiB, 'q'));
  OnLoop([&] {
    a_->Committed(big);
    return true;
  });
  ASSERT_TRUE(WaitFor([&] { return !Copies().empty(); }, 20s));
  EXPECT_EQ(Copies().front(), "rank-0@1 failed");
  EXPECT_FALSE(Newest(*b_, "rank-0"));
  EXPECT_EQ(OnLoop([&] { return b_->store().reserved_bytes(); }), 0u);
  auto small = Snapshot(2, "fits");
  OnLoop([&] {
    a_->Committed(small);
    return true;
  });
  EXPECT_TRUE(WaitForStep(*b_, "rank-0", 2));
}

TEST_P(ReplicaChannelPathTest, AReceiverThatDisappearsMidCopyCostsTheSenderALogLine) {
  a_ = Service("node-a");
  b_ = Service("node-b", 512 * kMiB);
  Round(*a_, *b_);
  auto big = Snapshot(1, Pattern(256 * kMiB, 'b'));
  OnLoop([&] {
    a_->Committed(big);
    return true;
  });
  // b goes away while the copy is in flight: it has taken the buffer for it.
  ASSERT_TRUE(
      WaitFor([&] { return OnLoop([&] { return b_->store().reserved_bytes() > 0; }); }, 20s));
  OnLoop([&] {
    b_->Shutdown();
    return true;
  });
  ASSERT_TRUE(WaitFor([&] { return !Copies().empty(); }, 30s));
  EXPECT_EQ(Copies().front(), "rank-0@1 failed");
  // A replacement node in the next round gets the next snapshot.
  auto c = Service("node-c");
  Round(*a_, *c);
  auto next = Snapshot(2, "after the loss");
  OnLoop([&] {
    a_->Committed(next);
    return true;
  });
  EXPECT_TRUE(WaitForStep(*c, "rank-0", 2));
  OnLoop([&] {
    c.reset();
    return true;
  });
}

}  // namespace
}  // namespace ftrun::launcher::replica_testing
