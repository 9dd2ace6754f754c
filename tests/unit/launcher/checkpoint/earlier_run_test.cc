// What an earlier run left in a checkpoint directory (CheckpointRequest::run_started), with real
// files: a new run that did not resume saves lower steps, and its saves replace the earlier
// run's as DLRover's do (the tracker lowered, a step saved again replaced), while within a run
// the tracker is never lowered and a stored step is kept; the loaders (storage.py) then skip
// the earlier run's steps above the tracker. A step several agents store together keeps the
// old rule. The earlier run's files are dated an hour back, as they would be.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "launcher/checkpoint/checkpoint_writer.h"
#include "launcher/checkpoint/staged_checkpoint.h"
#include "tests/support/test_support.h"
#include "tests/unit/launcher/checkpoint/snapshot_test_util.h"

namespace ftrun::launcher {
namespace {

namespace fs = std::filesystem;
using ftrun::testing::ReadFile;

class EarlierRunTest : public ::testing::Test {
 protected:
  // A request of step `step` holding local rank `rank`'s snapshot as group `group` ("" for the
  // one copy of a DDP job; "rank-<r>" for a shard of a 2-rank job, staged).
  CheckpointRequest Request(uint64_t step, const std::string& content, int rank = 0,
                            const std::string& group = "") {
    testing::Save(store_, rank, step, content);
    CheckpointRequest request{.root = root_,
                              .step = step,
                              .world_size = group.empty() ? 1 : 2,
                              .reason = "flash",
                              .parts = {{.group = group,
                                         .files = {{.name = "rank_0.pt",
                                                    .header = "",
                                                    .snapshot = store_.Newest(rank)}}}},
                              .tracker = "dlrover_latest.txt",
                              .link = "",
                              .shared = !group.empty()};
    return request;
  }

  // Stores `request` as the earlier run did (it counted everything as its own) and dates all
  // that root holds an hour back.
  void Earlier(CheckpointRequest request) {
    auto stored = request.shared ? StageShards(request) : WriteCheckpoint(request);
    ASSERT_TRUE(stored) << stored.error().message;
    const auto hour_ago = fs::file_time_type::clock::now() - std::chrono::hours(1);
    for (const auto& entry : fs::recursive_directory_iterator(root_)) {
      fs::last_write_time(entry.path(), hour_ago);
    }
  }

  // This run's request: it began now (with the agent's 2 s margin).
  CheckpointRequest ThisRun(CheckpointRequest request) {
    request.run_started = std::chrono::system_clock::now() - std::chrono::seconds(2);
    return request;
  }

  std::string File(uint64_t step, const std::string& group = "") {
    return ReadFile(root_ + "/ftrun-step-" + std::to_string(step) + "/" + PartDirName(group) +
                    "/rank_0.pt");
  }

  ftrun::testing::TempDir dir_;
  std::string root_ = dir_ / "ckpt";
  SnapshotStore store_{2, 64 << 20};
};

TEST_F(EarlierRunTest, ANewRunLowersTheTrackerReplacesItsStepAndNeverLowersItsOwn) {
  Earlier(Request(5, "earlier five"));
  Earlier(Request(50, "earlier fifty"));
  ASSERT_EQ(ReadFile(root_ + "/dlrover_latest.txt"), "50");

  auto five = WriteCheckpoint(ThisRun(Request(5, "this run's five")));
  ASSERT_TRUE(five) << five.error().message;
  EXPECT_EQ(File(5), "this run's five") << "the earlier run's step 5 is replaced";
  EXPECT_EQ(ReadFile(root_ + "/dlrover_latest.txt"), "5") << "an earlier run's tracker";

  // Within the run: a lower step stored late keeps the tracker, a step stored again is kept.
  ASSERT_TRUE(WriteCheckpoint(ThisRun(Request(3, "three"))));
  EXPECT_EQ(ReadFile(root_ + "/dlrover_latest.txt"), "5");
  ASSERT_TRUE(WriteCheckpoint(ThisRun(Request(5, "five again"))));
  EXPECT_EQ(File(5), "this run's five");
  EXPECT_EQ(testing::NamesIn(root_), "dlrover_latest.txt ftrun-step-3 ftrun-step-5 ftrun-step-50 ")
      << "nothing set aside is left";

  // What a load takes: this run's steps, not the earlier run's higher one.
  EXPECT_EQ(testing::Python("from ftrun.flash_checkpoint import storage\nprint(storage."
                            "loadable_steps(\"" +
                            root_ + "\", \"dlrover_latest.txt\"))"),
            "[5, 3]\nexit=0");
}

// A step the agents of several nodes store together ignores the run start: the agent of a node
// that joined late (replaced) would take this run's steps stored before it joined for an
// earlier run's.
TEST_F(EarlierRunTest, ASharedStepIgnoresTheRunStartOfANodeThatJoinedLate) {
  Earlier(Request(9, "rank 0 of 9", 0, "rank-0"));
  Earlier(Request(9, "rank 1 of 9", 1, "rank-1"));  // complete before the node joined
  auto late = StageShards(ThisRun(Request(7, "rank 0 of 7", 0, "rank-0")));
  ASSERT_TRUE(late) << late.error().message;
  EXPECT_EQ(*late, root_ + "/ftrun-step-9") << "superseded by the newer complete step";
  EXPECT_FALSE(fs::exists(root_ + "/.ftrun-step-7.parts"));
  EXPECT_EQ(ReadFile(root_ + "/dlrover_latest.txt"), "9");
}

// Without a run start (the default: the epoch) everything counts as this run's, as before.
TEST_F(EarlierRunTest, WithoutARunStartEverythingIsThisRuns) {
  Earlier(Request(50, "fifty"));
  ASSERT_TRUE(WriteCheckpoint(Request(5, "five")));
  EXPECT_EQ(ReadFile(root_ + "/dlrover_latest.txt"), "50");
}

}  // namespace
}  // namespace ftrun::launcher
