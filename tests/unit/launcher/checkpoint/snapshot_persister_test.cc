#include "launcher/checkpoint/snapshot_persister.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <boost/asio/executor_work_guard.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <string>

#include "tests/support/test_support.h"
#include "tests/unit/launcher/checkpoint/snapshot_test_util.h"

namespace ftrun::launcher {
namespace {

using testing::Python;
using testing::PythonLatest;
using testing::Save;

class SnapshotPersisterTest : public ::testing::Test {
 protected:
  // Persists `request` and waits (at most 30 s) for its completion on the loop.
  Result<std::string> Persist(CheckpointRequest request) {
    std::optional<Result<std::string>> outcome;
    persister_.Persist(std::move(request), [&](Result<std::string> r) { outcome = std::move(r); });
    loop_.restart();  // the previous wait's guard, gone, stopped it
    auto guard = boost::asio::make_work_guard(loop_);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!outcome && std::chrono::steady_clock::now() < deadline) {
      loop_.run_one_for(std::chrono::milliseconds(100));
    }
    if (!outcome) return Error{"no completion within 30 s"};
    return *outcome;
  }

  // One group per local rank given, each a file `name` holding "H" then the rank's snapshot.
  CheckpointRequest Request(uint64_t step, std::vector<std::pair<std::string, int>> groups,
                            const std::string& name = "state.bin") {
    CheckpointRequest request;
    request.root = root_;
    request.step = step;
    request.world_size = 2;
    request.tracker = "dlrover_latest.txt";
    for (const auto& [group, rank] : groups) {
      request.parts.push_back(
          {.group = group,
           .files = {{.name = name, .header = "H", .snapshot = store_.Newest(rank)}}});
    }
    return request;
  }

  std::string Leftovers() { return testing::NamesIn(root_); }

  ftrun::testing::TempDir dir_;
  std::string root_ = dir_ / "ckpt";
  boost::asio::io_context loop_;
  SnapshotStore store_{2, 64 << 20};
  SnapshotPersister persister_{loop_};
};

TEST_F(SnapshotPersisterTest, WritesWhatCheckpointPyVerifies) {
  std::string shard0 = testing::Pattern(3 << 20, 'a'), shard1 = testing::Pattern(1000, 'b');
  Save(store_, 0, 12, shard0);
  Save(store_, 1, 12, shard1);
  auto final_dir = Persist(Request(12, {{"rank-0", 0}, {"rank-1", 1}}));
  ASSERT_TRUE(final_dir) << final_dir.error().message;
  EXPECT_EQ(*final_dir, root_ + "/ftrun-step-12");
  EXPECT_EQ(PythonLatest(root_), "(12, ['rank-0', 'rank-1'])\nexit=0");
  EXPECT_EQ(Python("from ftrun import checkpoint as c\nprint(c.part_dir_name(\"rank-1\"), "
                   "c.part_dir_name(\"a b/c\"), c.part_dir_name(\"\"))"),
            PartDirName("rank-1") + " " + PartDirName("a b/c") + " group-all\nexit=0");
  EXPECT_EQ(ftrun::testing::ReadFile(*final_dir + "/" + PartDirName("rank-0") + "/state.bin"),
            "H" + shard0);
  EXPECT_EQ(ftrun::testing::ReadFile(root_ + "/dlrover_latest.txt"), "12");
  EXPECT_EQ(Leftovers(), "dlrover_latest.txt ftrun-step-12 ");
  // The persisted buffers are free again as soon as the completion runs.
  Save(store_, 0, 13, "x");
  Save(store_, 0, 14, "y");
}

TEST_F(SnapshotPersisterTest, ACompleteCheckpointIsNeverOverwritten) {
  Save(store_, 0, 5, "first copy");
  ASSERT_TRUE(Persist(Request(5, {{"", 0}})));
  Save(store_, 0, 5, "second copy");
  auto again = Persist(Request(5, {{"", 0}}));
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(ftrun::testing::ReadFile(*again + "/group-all/state.bin"), "Hfirst copy");
  // An older step persisted late does not lower the tracker.
  Save(store_, 0, 9, "nine");
  ASSERT_TRUE(Persist(Request(9, {{"", 0}})));
  Save(store_, 0, 8, "eight");
  ASSERT_TRUE(Persist(Request(8, {{"", 0}})));
  EXPECT_EQ(ftrun::testing::ReadFile(root_ + "/dlrover_latest.txt"), "9");
  EXPECT_EQ(PythonLatest(root_), "(9, [''])\nexit=0");
}

// An agent killed while writing a step leaves its temporary directory; the next persist on
// this machine removes it, and no complete checkpoint keeps the writer's marker.
TEST_F(SnapshotPersisterTest, TheNextPersistRemovesWhatAKilledWriterLeft) {
  std::filesystem::create_directories(root_);
  const std::string left = testing::KilledTempStepDir(root_, 3);
  ASSERT_TRUE(std::filesystem::exists(left));
  Save(store_, 0, 4, "four");
  auto stored = Persist(Request(4, {{"", 0}}));
  ASSERT_TRUE(stored) << stored.error().message;
  EXPECT_EQ(Leftovers(), "dlrover_latest.txt ftrun-step-4 ");
  EXPECT_EQ(testing::NamesIn(*stored), "MANIFEST.json group-all ");
}

// A tracker that names no step ("-1", as the Python side writes none; or not a number) is
// replaced; "-1" read as unsigned was 2^64-1 and kept every later step out of it.
TEST_F(SnapshotPersisterTest, ATrackerNamingNoStepIsReplaced) {
  std::filesystem::create_directories(root_);
  for (std::string before : {"-1\n", "-7", "not a step\n", "99999999999999999999999\n"}) {
    std::ofstream(root_ + "/dlrover_latest.txt") << before;
    Save(store_, 0, 3, "three");
    auto persisted = Persist(Request(3, {{"", 0}}));
    ASSERT_TRUE(persisted) << persisted.error().message;
    EXPECT_EQ(ftrun::testing::ReadFile(root_ + "/dlrover_latest.txt"), "3") << before;
  }
}

TEST_F(SnapshotPersisterTest, AFullDiskNamesThePathAndKeepsTheOldCheckpoint) {
  Save(store_, 0, 5, "five");
  ASSERT_TRUE(Persist(Request(5, {{"", 0}})));
  Save(store_, 0, 6, testing::Pattern(1 << 20, 's'));
  // The disk "fills up" after 64 KiB (for this process; SIGXFSZ ignored makes it EFBIG).
  rlimit before{};
  getrlimit(RLIMIT_FSIZE, &before);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = before;
  small.rlim_cur = 64 << 10;
  setrlimit(RLIMIT_FSIZE, &small);
  auto full = Persist(Request(6, {{"", 0}}));
  setrlimit(RLIMIT_FSIZE, &before);
  std::signal(SIGXFSZ, old_handler);
  ASSERT_FALSE(full);
  EXPECT_EQ(full.error().message.rfind("writing " + root_ + "/.ftrun-step-6.tmp-", 0), 0u)
      << full.error().message;
  EXPECT_NE(full.error().message.find("/group-all/state.bin: File too large"), std::string::npos)
      << full.error().message;
  EXPECT_EQ(Leftovers(), "dlrover_latest.txt ftrun-step-5 ");
  EXPECT_EQ(PythonLatest(root_), "(5, [''])\nexit=0");
  EXPECT_EQ(ftrun::testing::ReadFile(root_ + "/dlrover_latest.txt"), "5");
}

TEST_F(SnapshotPersisterTest, AnUnwritableDirectoryIsNamed) {
  std::ofstream(dir_ / "file") << "not a directory";
  root_ = dir_ / "file/ckpt";
  Save(store_, 0, 1, "one");
  auto failed = Persist(Request(1, {{"", 0}}));
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().message.rfind("creating " + root_ + ": ", 0), 0u)
      << failed.error().message;
}

TEST_F(SnapshotPersisterTest, ACorruptSnapshotIsNotPersisted) {
  int fd = Save(store_, 0, 3, testing::Pattern(200000, 'c'));
  testing::WriteThrough(fd, 150000, "!");
  auto failed = Persist(Request(3, {{"", 0}}));
  ASSERT_FALSE(failed);
  EXPECT_NE(failed.error().message.find("the snapshot of local rank 0 at step 3 has checksum"),
            std::string::npos)
      << failed.error().message;
  EXPECT_EQ(Leftovers(), "");
}

TEST_F(SnapshotPersisterTest, BadNamesAreRefusedBeforeWriting) {
  Save(store_, 0, 3, "three");
  auto failed = Persist(Request(3, {{"", 0}}, "../escape"));
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().message,
            "checkpoint under " + root_ +
                ": file name '../escape' of group '' is not a plain printable-ASCII name");
  EXPECT_FALSE(std::filesystem::exists(root_));
}

}  // namespace
}  // namespace ftrun::launcher
