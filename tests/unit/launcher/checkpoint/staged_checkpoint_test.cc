// StageShards: several writers (the agents of a multi-node job) storing one sharded step in a
// shared directory, with real files and checkpoint.py reading what they wrote.
#include "launcher/checkpoint/staged_checkpoint.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "launcher/checkpoint/checkpoint_io.h"
#include "tests/support/test_support.h"
#include "tests/unit/launcher/checkpoint/snapshot_test_util.h"

namespace ftrun::launcher {
namespace {

namespace fs = std::filesystem;
using ftrun::testing::ReadFile;
using testing::PythonLatest;

class StagedCheckpointTest : public ::testing::Test {
 protected:
  StagedCheckpointTest() {
    for (int rank = 0; rank < 4; ++rank) {
      testing::Save(store_, rank, 7, "shard " + std::to_string(rank) + " of step 7");
    }
  }

  // The request of a writer holding the shards `ranks` of step `step` of a 4-rank job.
  CheckpointRequest Holding(std::vector<int> ranks, uint64_t step = 7) {
    CheckpointRequest request{.root = root_,
                              .step = step,
                              .world_size = 4,
                              .reason = "failure",
                              .parts = {},
                              .tracker = "dlrover_latest.txt",
                              .link = dir_ / ("link-" + std::to_string(step)),
                              .shared = true};
    for (int rank : ranks) {
      if (store_.Newest(rank)->step != step)
        testing::Save(store_, rank, step, "step " + std::to_string(step));
      request.parts.push_back({.group = "rank-" + std::to_string(rank),
                               .files = {{.name = "rank_" + std::to_string(rank) + ".pt",
                                          .header = "",
                                          .snapshot = store_.Newest(rank)}}});
    }
    return request;
  }

  std::string Names() { return testing::NamesIn(root_); }

  ftrun::testing::TempDir dir_;
  std::string root_ = dir_ / "ckpt";
  SnapshotStore store_{4, 64 << 20};
};

TEST_F(StagedCheckpointTest, EachWritersPartLinksLeadToItsShardOnceTheStepIsComplete) {
  // Megatron-LM's iter_<N>/mp_rank_XX: each shard's own link, made by the writer that holds it.
  auto with_links = [&](std::vector<int> ranks) {
    CheckpointRequest request = Holding(ranks);
    for (auto& part : request.parts) part.link = dir_ / ("rank-dir-" + part.group.substr(5));
    return request;
  };
  ASSERT_TRUE(StageShards(with_links({0, 1})));
  EXPECT_TRUE(fs::is_symlink(dir_ / "rank-dir-1"));  // made already, resolving once complete
  EXPECT_FALSE(fs::exists(dir_ / "rank-dir-1"));
  auto done = StageShards(with_links({2, 3}));
  ASSERT_TRUE(done) << done.error().message;
  for (int rank = 0; rank < 4; ++rank) {
    const std::string r = std::to_string(rank);
    EXPECT_EQ(ReadFile(dir_ / ("rank-dir-" + r) + "/rank_" + r + ".pt"),
              "shard " + r + " of step 7");
  }
}

TEST_F(StagedCheckpointTest, TwoWritersCompleteTheStepTogetherAndOnlyThenTheTrackerNamesIt) {
  auto first = StageShards(Holding({0, 1}));
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_NE(first->find("2 of 4 shards staged (missing rank-2, rank-3)"), std::string::npos)
      << *first;
  EXPECT_FALSE(fs::exists(root_ + "/ftrun-step-7"));
  EXPECT_FALSE(fs::exists(root_ + "/dlrover_latest.txt")) << "never a partial step";
  EXPECT_EQ(PythonLatest(root_), "None\nexit=0") << "loaders ignore the staging area";

  auto second = StageShards(Holding({2, 3}));
  ASSERT_TRUE(second) << second.error().message;
  EXPECT_EQ(*second, root_ + "/ftrun-step-7");
  EXPECT_EQ(PythonLatest(root_), "(7, ['rank-0', 'rank-1', 'rank-2', 'rank-3'])\nexit=0");
  EXPECT_EQ(ReadFile(root_ + "/ftrun-step-7/" + PartDirName("rank-2") + "/rank_2.pt"),
            "shard 2 of step 7");
  EXPECT_EQ(ReadFile(root_ + "/dlrover_latest.txt"), "7");
  EXPECT_EQ(Names(), "dlrover_latest.txt ftrun-step-7 ") << "the staging area is gone";
  EXPECT_EQ(fs::canonical(dir_ / "link-7"), fs::canonical(root_ + "/ftrun-step-7"));
}

TEST_F(StagedCheckpointTest, AShardStagedByAnotherWriterIsNotWrittenAgain) {
  ASSERT_TRUE(StageShards(Holding({0, 1, 2})));  // rank 2 from a replica
  std::string staged = StagingDir(root_, 7) + "/" + PartDirName("rank-2") + "/rank_2.pt";
  auto inode = fs::hard_link_count(staged);
  auto done = StageShards(Holding({2, 3}));
  ASSERT_TRUE(done) << done.error().message;
  EXPECT_EQ(*done, root_ + "/ftrun-step-7");
  EXPECT_EQ(inode, 1u);
  EXPECT_EQ(PythonLatest(root_), "(7, ['rank-0', 'rank-1', 'rank-2', 'rank-3'])\nexit=0");
}

TEST_F(StagedCheckpointTest, ACompleteStepIsNeverOverwrittenNorAnOlderOneStagedAfterIt) {
  ASSERT_TRUE(StageShards(Holding({0, 1, 2, 3})));
  auto before = fs::last_write_time(root_ + "/ftrun-step-7/MANIFEST.json");
  auto again = StageShards(Holding({0, 1, 2, 3}));
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(*again, root_ + "/ftrun-step-7");
  EXPECT_EQ(fs::last_write_time(root_ + "/ftrun-step-7/MANIFEST.json"), before);
  auto older = StageShards(Holding({0, 1}, 6));
  ASSERT_TRUE(older) << older.error().message;
  EXPECT_EQ(*older, root_ + "/ftrun-step-7") << "a newer step is complete";
  EXPECT_EQ(Names(), "dlrover_latest.txt ftrun-step-7 ");
}

TEST_F(StagedCheckpointTest, AStagingAreaOfAStepThatANewerCompleteStepSupersedesIsRemoved) {
  ASSERT_TRUE(StageShards(Holding({0}, 6)));  // another writer staged step 6 ...
  CheckpointRequest whole = Holding({0, 1, 2, 3}, 8);
  whole.shared = false;  // ... then step 8 was stored whole (by a writer not removing it)
  ASSERT_TRUE(WriteCheckpoint(whole));
  ASSERT_TRUE(fs::exists(StagingDir(root_, 6)));
  auto late = StageShards(Holding({1}, 6));
  ASSERT_TRUE(late) << late.error().message;
  EXPECT_EQ(*late, root_ + "/ftrun-step-8");
  EXPECT_EQ(Names(), "dlrover_latest.txt ftrun-step-8 ");
}

TEST_F(StagedCheckpointTest, APartialNewerStepLeavesTheTrackerOnTheCompleteOne) {
  ASSERT_TRUE(StageShards(Holding({0, 1, 2, 3}, 5)));
  ASSERT_TRUE(StageShards(Holding({0, 1, 3}, 7)));  // rank 2's holder was killed
  EXPECT_EQ(ReadFile(root_ + "/dlrover_latest.txt"), "5");
  EXPECT_EQ(PythonLatest(root_), "(5, ['rank-0', 'rank-1', 'rank-2', 'rank-3'])\nexit=0");
  EXPECT_FALSE(fs::exists(root_ + "/ftrun-step-7"));
}

TEST_F(StagedCheckpointTest, AWriterKilledMidPartLeavesNothingAnotherWriterTakesForAPart) {
  ASSERT_TRUE(StageShards(Holding({0})));
  // What a writer killed in the middle of rank 1's part leaves: its private directory.
  std::string killed = StagingDir(root_, 7) + "/.tmp-1-2/" + PartDirName("rank-1");
  fs::create_directories(killed);
  std::ofstream(killed + "/rank_1.pt") << "half";
  auto partial = StageShards(Holding({2, 3}));
  ASSERT_TRUE(partial) << partial.error().message;
  EXPECT_NE(partial->find("3 of 4 shards staged (missing rank-1)"), std::string::npos) << *partial;
  auto done = StageShards(Holding({1}));
  ASSERT_TRUE(done) << done.error().message;
  EXPECT_EQ(*done, root_ + "/ftrun-step-7");
  EXPECT_EQ(ReadFile(root_ + "/ftrun-step-7/" + PartDirName("rank-1") + "/rank_1.pt"),
            "shard 1 of step 7");
  EXPECT_EQ(Names(), "dlrover_latest.txt ftrun-step-7 ");
}

TEST_F(StagedCheckpointTest, AStagedPartOfAnotherStepIsNotTaken) {
  ASSERT_TRUE(StageShards(Holding({0, 1, 2})));
  // A PART.json saying step 6 where rank 3's part of step 7 should be.
  std::string wrong = StagingDir(root_, 7) + "/" + PartDirName("rank-3");
  fs::create_directories(wrong);
  std::ofstream(wrong + "/PART.json")
      << R"({"dir": "x", "files": {}, "group": "rank-3", "step": 6})";
  auto outcome = StageShards(Holding({0}));
  ASSERT_TRUE(outcome) << outcome.error().message;
  EXPECT_NE(outcome->find("missing rank-3"), std::string::npos) << *outcome;
  EXPECT_FALSE(fs::exists(root_ + "/ftrun-step-7"));
}

TEST_F(StagedCheckpointTest, AStagedPartWithoutAChecksumIsNotTaken) {
  ASSERT_TRUE(StageShards(Holding({0, 1, 2})));
  std::string part = StagingDir(root_, 7) + "/" + PartDirName("rank-3");
  fs::create_directories(part);
  std::ofstream(part + "/rank_3.pt") << "x";
  std::ofstream(part + "/PART.json") << R"({"dir": "x", "files": {"rank_3.pt": {"size": 1}},)"
                                     << R"( "group": "rank-3", "step": 7})";
  auto outcome = StageShards(Holding({0}));
  ASSERT_TRUE(outcome) << outcome.error().message;
  EXPECT_NE(outcome->find("missing rank-3"), std::string::npos) << *outcome;
  EXPECT_FALSE(fs::exists(root_ + "/ftrun-step-7"));
}

TEST_F(StagedCheckpointTest, WritersRacingOnOneStepMakeExactlyOneCompleteCheckpoint) {
  for (int round = 0; round < 5; ++round) {
    uint64_t step = 7 + static_cast<uint64_t>(round);
    for (int rank = 0; rank < 4; ++rank) {
      testing::Save(store_, rank, step,
                    "shard " + std::to_string(rank) + " round " + std::to_string(round));
    }
    std::vector<Result<std::string>> outcomes(4, Error{"not run"});
    std::vector<std::thread> writers;
    for (int w = 0; w < 4; ++w) {  // everyone holds every shard (replicas everywhere)
      writers.emplace_back([&, w] { outcomes[w] = StageShards(Holding({0, 1, 2, 3}, step)); });
    }
    for (auto& t : writers) t.join();
    for (const auto& outcome : outcomes) {
      ASSERT_TRUE(outcome) << outcome.error().message;
      EXPECT_EQ(*outcome, root_ + "/ftrun-step-" + std::to_string(step));
    }
    EXPECT_EQ(ReadFile(root_ + "/dlrover_latest.txt"), std::to_string(step));
  }
  EXPECT_EQ(PythonLatest(root_), "(11, ['rank-0', 'rank-1', 'rank-2', 'rank-3'])\nexit=0");
  for (const auto& entry : fs::directory_iterator(root_)) {
    std::string name = entry.path().filename().string();
    EXPECT_FALSE(name.starts_with(".")) << name << " left behind";
  }
}

TEST_F(StagedCheckpointTest, BadNamesAreAnErrorNamingThem) {
  CheckpointRequest request = Holding({0});
  request.parts[0].files[0].name = "../escape";
  auto outcome = StageShards(request);
  ASSERT_FALSE(outcome);
  EXPECT_NE(outcome.error().message.find("'../escape'"), std::string::npos);
  EXPECT_FALSE(fs::exists(root_));
}

// The temporary-name suffix of a process that is pid 1 of a new pid namespace, as an agent in
// a container often is; nullopt where namespaces cannot be made (no CAP_SYS_ADMIN).
std::optional<std::string> SuffixAsPidOne() {
  int fds[2];
  if (pipe(fds) != 0) return std::nullopt;
  const pid_t child = fork();
  if (child == 0) {
    close(fds[0]);
    if (unshare(CLONE_NEWPID) != 0) _exit(2);
    const pid_t inner = fork();  // the namespace's first process: pid 1
    if (inner == 0) {
      const std::string suffix = checkpoint_io::UniqueSuffix();
      _exit(write(fds[1], suffix.data(), suffix.size()) == static_cast<ssize_t>(suffix.size()) ? 0
                                                                                               : 3);
    }
    int status = 0;
    _exit(inner > 0 && waitpid(inner, &status, 0) == inner && WIFEXITED(status) &&
                  WEXITSTATUS(status) == 0
              ? 0
              : 3);
  }
  close(fds[1]);
  std::string out;
  char buf[256];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, n);
  close(fds[0]);
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status) ||
      WEXITSTATUS(status) != 0) {
    return std::nullopt;
  }
  return out;
}

// Agents of several nodes staging into one shared directory from containers are all pid 1,
// and their per-process counters advance alike: their temporary names must still differ.
TEST(UniqueSuffixTest, WritersThatArePidOneOfTheirContainersPickDifferentNames) {
  auto a = SuffixAsPidOne();
  auto b = SuffixAsPidOne();
  if (!a || !b) GTEST_SKIP() << "no pid namespaces here (needs CAP_SYS_ADMIN)";
  EXPECT_EQ(a->substr(0, 2), "1-") << *a;
  EXPECT_EQ(b->substr(0, 2), "1-") << *b;
  EXPECT_NE(*a, *b);
}

}  // namespace
}  // namespace ftrun::launcher
