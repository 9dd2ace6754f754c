// What an earlier run left in a checkpoint directory (CheckpointRequest::run_started), with real
// files: a new run that did not resume saves lower steps, and its saves replace the earlier
// run's as DLRover's do (the tracker lowered, a step saved again replaced), while within a run
// the tracker is never lowered and a stored step is kept; the loaders (storage.py) then skip
// the earlier run's steps above the tracker. Steps several agents store together (StageShards,
// given the job's start) follow the same rule, staged parts included. The earlier run's files
// are dated an hour back, as they would be.
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

// Shards the agents of several nodes store together (each writer given the job's start): an
// earlier run's newer step does not supersede this run's, its same step is replaced.
TEST_F(EarlierRunTest, ASharedStepOfANewRunIsNotSupersededByAnEarlierRunsAndReplacesIt) {
  for (uint64_t step : {7, 9}) {
    Earlier(Request(step, "earlier rank 0", 0, "rank-0"));
    Earlier(Request(step, "earlier rank 1", 1, "rank-1"));
  }
  ASSERT_EQ(ReadFile(root_ + "/dlrover_latest.txt"), "9");
  auto half = StageShards(ThisRun(Request(7, "rank 0 of 7", 0, "rank-0")));
  ASSERT_TRUE(half) << half.error().message;
  EXPECT_NE(half->find("1 of 2 shards staged (missing rank-1)"), std::string::npos) << *half;
  auto whole = StageShards(ThisRun(Request(7, "rank 1 of 7", 1, "rank-1")));
  ASSERT_TRUE(whole) << whole.error().message;
  EXPECT_EQ(*whole, root_ + "/ftrun-step-7");
  EXPECT_EQ(File(7, "rank-0"), "rank 0 of 7");
  EXPECT_EQ(File(7, "rank-1"), "rank 1 of 7");
  EXPECT_EQ(ReadFile(root_ + "/dlrover_latest.txt"), "7") << "an earlier run's tracker";
  EXPECT_EQ(testing::NamesIn(root_), "dlrover_latest.txt ftrun-step-7 ftrun-step-9 ");
  EXPECT_EQ(testing::Python("from ftrun.flash_checkpoint import storage\nprint(storage."
                            "loadable_steps(\"" +
                            root_ + "\", \"dlrover_latest.txt\"))"),
            "[7]\nexit=0");
}

// An earlier run's staged part (its step never completed) neither completes this run's step
// nor stays: this run's shard of that rank replaces it.
TEST_F(EarlierRunTest, AnEarlierRunsStagedPartIsNotCountedAndIsReplaced) {
  Earlier(Request(4, "earlier rank 1 of 4", 1, "rank-1"));
  ASSERT_TRUE(fs::exists(root_ + "/.ftrun-step-4.parts/" + PartDirName("rank-1")));
  auto half = StageShards(ThisRun(Request(4, "rank 0 of 4", 0, "rank-0")));
  ASSERT_TRUE(half) << half.error().message;
  EXPECT_NE(half->find("1 of 2 shards staged (missing rank-1)"), std::string::npos) << *half;
  auto whole = StageShards(ThisRun(Request(4, "rank 1 of 4", 1, "rank-1")));
  ASSERT_TRUE(whole) << whole.error().message;
  EXPECT_EQ(*whole, root_ + "/ftrun-step-4");
  EXPECT_EQ(File(4, "rank-1"), "rank 1 of 4");
  EXPECT_EQ(testing::NamesIn(root_), "dlrover_latest.txt ftrun-step-4 ");
}

// Without a run start (the default: the epoch) everything counts as this run's, as before.
TEST_F(EarlierRunTest, WithoutARunStartEverythingIsThisRuns) {
  Earlier(Request(50, "fifty"));
  ASSERT_TRUE(WriteCheckpoint(Request(5, "five")));
  EXPECT_EQ(ReadFile(root_ + "/dlrover_latest.txt"), "50");
}

}  // namespace
}  // namespace ftrun::launcher
