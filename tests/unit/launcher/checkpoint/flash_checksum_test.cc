// The checksum a snapshot gets at its commit (SnapshotChecksummer, off the loop): it is the
// CRC-32C of the bytes as committed, a restore checks the bytes against it and skips a copy
// changed since (a warning naming it, the next source tried), the persister records it, and a
// buffer handed to a newer save gets none.
#include <spdlog/sinks/ringbuffer_sink.h>

#include <boost/asio/executor_work_guard.hpp>
#include <string>

#include "tests/unit/launcher/checkpoint/flash_service_fixture.h"
#include "tests/unit/launcher/checkpoint/snapshot_test_util.h"

namespace ftrun::launcher {
namespace {

using ftrun::testing::ReadFile;
using testing::AsBytes;
using testing::FlashServiceTest;
using testing::Pattern;
using testing::Target;

class FlashChecksumTest : public FlashServiceTest {
 protected:
  FlashChecksumTest() { LauncherLog()->sinks().push_back(log_); }
  ~FlashChecksumTest() override { std::erase(LauncherLog()->sinks(), log_); }

  // A whole save whose lease descriptor is kept, so the test can change the bytes afterwards.
  int SaveKeepingFd(int lr, int64_t step, const std::string& content, const std::string& group) {
    const Sent& lease = Begin(lr, step, static_cast<int64_t>(content.size()), group);
    EXPECT_EQ(lease.type(), "snapshot_lease") << lease.error();
    const int fd = lease.fd;
    testing::WriteThrough(fd, 0, content);
    EXPECT_TRUE(Commit(lr, step).flag("ok"));
    return fd;
  }
  std::optional<uint32_t> CommitCrc(int lr) {
    std::optional<uint32_t> crc;
    RunUntil(
        [&] { return (crc = service().store().Newest(lr)->meta.checksum.value()).has_value(); });
    return crc;
  }
  bool Logged(const std::string& text) {
    for (const auto& line : log_->last_formatted()) {
      if (line.find(text) != std::string::npos) return true;
    }
    return false;
  }

  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> log_ =
      std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(64);
};

TEST_F(FlashChecksumTest, EachCommitGetsTheCrc32cOfItsBytesOffTheLoop) {
  const std::string content = Pattern(3 << 20, 'k');
  Save(0, 4, content);
  EXPECT_EQ(CommitCrc(0), SnapshotChecksum(AsBytes(content)));
  EXPECT_EQ(Get(0, 4), content) << "an intact snapshot is handed over";
}

TEST_F(FlashChecksumTest, ASmallSnapshotHasItsCrcWhenItsCommitIsHandled) {
  const std::string content = Pattern(4096, 's');  // an every-step save's size: no hand-off
  Save(0, 5, content);
  const auto crc = service().store().Newest(0)->meta.checksum.value();
  EXPECT_EQ(crc, SnapshotChecksum(AsBytes(content)));
}

TEST_F(FlashChecksumTest, ASnapshotChangedSinceItsCommitIsSkippedForTheNextSource) {
  const std::string content = Pattern(1 << 20, 'a');
  const int fd = SaveKeepingFd(0, 5, content, "rank-0");
  ASSERT_TRUE(CommitCrc(0));
  testing::WriteThrough(fd, 700000, "!");  // a bit flipped in the agent's memory
  ReplicaStore replicas(64 << 20);
  auto write = replicas.Begin("rank-0", 5, content.size(), "node-b");
  ASSERT_TRUE(write);
  std::copy_n(reinterpret_cast<const std::byte*>(content.data()), content.size(),
              write->data().begin());
  const uint32_t crc = SnapshotChecksum(AsBytes(content));
  ASSERT_TRUE(replicas.Finish(write->id, crc, crc));
  service().SetReplicas(&replicas);
  EXPECT_EQ(Get(0, 5, "rank-0"), content) << "served from the intact replica of the same step";
  EXPECT_TRUE(Logged("the snapshot of local rank 0 at step 5 has checksum"));
  EXPECT_TRUE(Logged("skipped (corrupt), trying the next source"));

  service().SetReplicas(nullptr);
  const Sent& refused = GetAnswer(0, 5, "rank-0");
  EXPECT_EQ(refused.type(), "snapshot_refused");
  EXPECT_NE(refused.error().find("has changed since it was saved"), std::string::npos)
      << refused.error();
}

TEST_F(FlashChecksumTest, TheOlderStepStaysRestorableWhenTheNewestIsCorrupt) {
  Save(0, 1, "one");
  const int fd = SaveKeepingFd(0, 2, "two", "");
  ASSERT_TRUE(CommitCrc(0));
  testing::WriteThrough(fd, 0, "TWO");
  EXPECT_EQ(Get(0, 2).rfind("refused: ", 0), 0u);
  EXPECT_EQ(Get(0, 1), "one");
}

TEST_F(FlashChecksumTest, ThePersistedPartRecordsTheCommitChecksum) {
  const std::string content = Pattern(100000, 'p');
  Target to = TargetIn("ckpt");
  to.persist = true;
  Save(0, 3, content, "", to);
  ASSERT_TRUE(Persisted());
  const std::string part = ReadFile(to.root + "/ftrun-step-3/group-all/PART.json");
  EXPECT_NE(part.find("\"crc32c\": " + std::to_string(SnapshotChecksum(AsBytes(content)))),
            std::string::npos)
      << part;
  EXPECT_EQ(testing::PythonLatest(to.root), "(3, [''])\nexit=0") << "checkpoint.py accepts it";
}

TEST(SnapshotChecksummerTest, ABufferHandedToANewerSaveGetsNoChecksum) {
  boost::asio::io_context io;
  SnapshotStore store(1, 1 << 20);
  testing::Save(store, 0, 1, "one");
  SnapshotView first = *store.Newest(0);
  first.meta.checksum = CommitChecksum::Pending();
  // As if a Begin had handed the buffer out again after the view was taken (a real one would
  // be refused: the view pins the buffer).
  first.generation -= 1;
  SnapshotChecksummer checksummer(io);
  std::optional<std::string> why;
  checksummer.Commit(first, [&](std::optional<uint32_t> crc, const std::string& w) {
    EXPECT_FALSE(crc);
    why = w;
  });
  auto work = boost::asio::make_work_guard(io);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!why && std::chrono::steady_clock::now() < until) {
    io.run_one_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("handed to a newer save"), std::string::npos) << *why;
  EXPECT_FALSE(first.meta.checksum.pending());
  EXPECT_FALSE(first.meta.checksum.value());
}

}  // namespace
}  // namespace ftrun::launcher
