// Two agents' replica services on loopback, real gRPC, one real loop thread: a shard
// snapshot is copied, forged or broken copies are refused, and a receiver that disappears
// mid-copy costs the sender nothing but a log line.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <future>
#include <thread>

#include "ftrun/v1/replica.grpc.pb.h"
#include "launcher/replica/crc32c.h"
#include "launcher/replica/replica_service.h"
#include "tests/support/test_support.h"
#include "tests/unit/launcher/checkpoint/snapshot_test_util.h"

namespace ftrun::launcher {
namespace {

using namespace std::chrono_literals;
using ftrun::testing::WaitFor;
using testing::Pattern;
using testing::Save;

constexpr uint64_t kMiB = uint64_t{1} << 20;
const char* kKey = "0123456789abcdef0123456789abcdef";

class ReplicaChannelTest : public ::testing::Test {
 protected:
  template <class F>
  auto OnLoop(F f) -> decltype(f()) {
    std::packaged_task<decltype(f())()> task(std::move(f));
    auto result = task.get_future();
    boost::asio::post(io_, [&task] { task(); });
    return result.get();
  }

  ReplicaChannelTest() : work_(io_.get_executor()), loop_([this] { io_.run(); }) {}
  ~ReplicaChannelTest() override {
    OnLoop([this] {
      a_.reset();
      b_.reset();
      return true;
    });
    work_.reset();
    loop_.join();
  }

  std::unique_ptr<ReplicaService> Service(const std::string& host, uint64_t budget = 64 * kMiB) {
    return OnLoop([&] {
      ReplicaService::Options o;
      o.budget_bytes = budget;
      o.copies = 2;
      o.host = host;
      auto s = std::make_unique<ReplicaService>(io_, o);
      auto port = s->Listen("127.0.0.1");
      EXPECT_TRUE(port) << (port ? "" : port.error().message);
      s->OnCopied([this](const std::string&, const std::string& group, uint64_t step,
                         const Status& outcome, double) {
        std::lock_guard lock(mu_);
        copies_.push_back(group + "@" + std::to_string(step) + (outcome ? " ok" : " failed"));
      });
      return s;
    });
  }

  // Nodes a (group rank 0) and b (1) in one round.
  void Round(ReplicaService& a, ReplicaService& b, const std::string& key = kKey) {
    OnLoop([&] {
      rendezvous::NodeAssignment r;
      r.round = 1;
      r.group_world_size = 2;
      r.replica_key = key;
      r.replica_peers = {"127.0.0.1:" + std::to_string(a.server().port()),
                         "127.0.0.1:" + std::to_string(b.server().port())};
      r.group_rank = 0;
      a.RoundStarted(r);
      r.group_rank = 1;
      b.RoundStarted(r);
      return true;
    });
  }

  // A committed snapshot of shard `group` at `step` on this node.
  SnapshotView Snapshot(uint64_t step, const std::string& content,
                        const std::string& group = "rank-0") {
    Save(snapshots_, 0, step, content);
    auto view = *snapshots_.Newest(0);
    view.meta.group = group;
    return view;
  }

  std::optional<ReplicaView> Newest(ReplicaService& s, const std::string& group) {
    return OnLoop([&]() -> std::optional<ReplicaView> {
      auto views = s.store().Complete(group);
      if (views.empty()) return std::nullopt;
      return views.front();
    });
  }

  bool WaitForStep(ReplicaService& s, const std::string& group, uint64_t step) {
    return WaitFor(
        [&] {
          auto v = Newest(s, group);
          return v && v->step == step;
        },
        20s);
  }

  std::vector<std::string> Copies() {
    std::lock_guard lock(mu_);
    return copies_;
  }

  boost::asio::io_context io_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
  std::thread loop_;
  SnapshotStore snapshots_{1, 600 * kMiB};
  std::unique_ptr<ReplicaService> a_, b_;
  std::mutex mu_;
  std::vector<std::string> copies_;
};

// A raw client: what a stranger (or a broken sender) can send.
grpc::Status RawPush(int port, const std::string& key, const std::string& data, bool finish,
                     uint64_t bytes = 0, std::optional<uint32_t> crc = std::nullopt,
                     const std::string& name = "") {
  auto stub = v1::Replica::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 10s);
  v1::ReplicaAck ack;
  auto writer = stub->Push(&ctx, &ack);
  v1::ReplicaChunk chunk;
  chunk.mutable_header()->set_key(key);
  chunk.mutable_header()->set_group("rank-0");
  chunk.mutable_header()->set_step(99);
  chunk.mutable_header()->set_bytes(bytes ? bytes : data.size());
  chunk.mutable_header()->set_name(name);
  chunk.set_data(data);
  chunk.set_last(finish);
  chunk.set_crc32c(crc.value_or(Crc32c(testing::AsBytes(data))));
  writer->Write(chunk);
  if (!finish) {
    ctx.TryCancel();  // the sender is gone mid-copy
    return writer->Finish();
  }
  writer->WritesDone();
  return writer->Finish();
}

TEST_F(ReplicaChannelTest, AShardSnapshotIsCopiedToTheNextNode) {
  a_ = Service("node-a");
  b_ = Service("node-b");
  Round(*a_, *b_);
  const std::string content = Pattern(9 * kMiB + 123, 'x');  // three chunks
  auto view = Snapshot(4, content);
  view.meta.target.name = "model_optim_rng.pt";  // the file name the rank gave its shard
  OnLoop([&] {
    a_->Committed(view);
    return true;
  });
  ASSERT_TRUE(WaitForStep(*b_, "rank-0", 4));
  auto replica = *Newest(*b_, "rank-0");
  EXPECT_EQ(replica.from, "node-a");
  EXPECT_EQ(replica.name, "model_optim_rng.pt");
  ASSERT_EQ(replica.bytes, content.size());
  EXPECT_EQ(std::memcmp(replica.data().data(), content.data(), content.size()), 0);
  ASSERT_TRUE(WaitFor([&] { return !Copies().empty(); }, 10s));
  EXPECT_EQ(Copies().front(), "rank-0@4 ok");
  // A DDP copy ("" group) is not sent: every node restores it from any other already.
  auto ddp = Snapshot(5, "ddp", "");
  OnLoop([&] {
    a_->Committed(ddp);
    return true;
  });
  EXPECT_FALSE(WaitFor([&] { return Copies().size() > 1; }, 300ms));
}

TEST_F(ReplicaChannelTest, NewestWinsWhileACopyIsInFlight) {
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

TEST_F(ReplicaChannelTest, ASnapshotOverwrittenDuringItsCopyIsNotStoredAndSavesAreNotRefused) {
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

TEST_F(ReplicaChannelTest, TheCommitChecksumIsSentSoBytesChangedSinceAreRefused) {
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

TEST_F(ReplicaChannelTest, ACopyWaitsForACommitChecksumStillBeingComputed) {
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

TEST_F(ReplicaChannelTest, ACopyWithoutTheJobsKeyIsRefusedAndStoresNothing) {
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

TEST_F(ReplicaChannelTest, ACopyNamingItsShardFileOutsideItsDirectoryIsRefused) {
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
  EXPECT_FALSE(Newest(*b_, "rank-0"));
  EXPECT_TRUE(RawPush(port, kKey, "good", true, 0, std::nullopt, "shard.pt").ok());
  EXPECT_EQ(Newest(*b_, "rank-0")->name, "shard.pt");
}

TEST_F(ReplicaChannelTest, ABrokenCopyLeavesThePreviousReplica) {
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
  auto kept = Newest(*b_, "rank-0");
  ASSERT_TRUE(kept);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(kept->data().data()), kept->bytes),
            "complete");
  // The group is not left blocked by the broken copies.
  ASSERT_TRUE(WaitFor([&] { return RawPush(port, kKey, "again", true).ok(); }, 10s));
}

TEST_F(ReplicaChannelTest, ACopyWhoseChecksumDiffersIsRefusedAndThePreviousReplicaKept) {
  b_ = Service("node-b");
  a_ = Service("node-a");
  Round(*a_, *b_);
  const int port = b_->server().port();
  ASSERT_TRUE(RawPush(port, kKey, "complete", true).ok());
  const std::string other = "altered!";
  auto refused = RawPush(port, kKey, other, true, 0, Crc32c(testing::AsBytes(other)) ^ 1);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(refused.error_message().find("checksum"), std::string::npos) << refused.error_message();
  auto kept = Newest(*b_, "rank-0");
  ASSERT_TRUE(kept);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(kept->data().data()), kept->bytes),
            "complete");
}

TEST_F(ReplicaChannelTest, ACopyOverTheReceiversBudgetIsRefusedWholeAndTheSenderGoesOn) {
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

TEST_F(ReplicaChannelTest, AReceiverThatDisappearsMidCopyCostsTheSenderALogLine) {
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
}  // namespace ftrun::launcher
