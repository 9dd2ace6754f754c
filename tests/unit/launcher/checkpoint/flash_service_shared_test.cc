// FlashService when the job fails and its shards span nodes: two agents (two services on one
// loop, as two nodes' agents) storing the steps they hold between them, with and without the
// replicas of each other's shards.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "launcher/checkpoint/staged_checkpoint.h"
#include "launcher/replica/replica_store.h"
#include "tests/unit/launcher/checkpoint/flash_service_fixture.h"
#include "tests/unit/launcher/checkpoint/snapshot_test_util.h"

namespace ftrun::launcher {
namespace {

namespace fs = std::filesystem;
using ftrun::testing::ReadFile;
using FlashSharedTest = testing::FlashServiceTest;
using testing::Target;

// A 4-rank job: ranks 0 and 1 on the first agent, 2 and 3 on the second.
Target Job(Target to) {
  to.world_size = 4;
  return to;
}

std::string Shard(const Target& to, uint64_t step, int rank) {
  return ReadFile(to.root + "/ftrun-step-" + std::to_string(step) + "/" +
                  PartDirName("rank-" + std::to_string(rank)) + "/rank_" + std::to_string(rank) +
                  ".pt");
}

TEST_F(FlashSharedTest, TwoAgentsStoreTheNewestStepEveryShardHoldsBetweenThem) {
  Target to = Job(TargetIn("multi"));
  for (int step : {5, 6}) {
    for (int lr : {0, 1}) {
      to.name = "rank_" + std::to_string(lr) + ".pt";
      Save(lr, step, "r" + std::to_string(lr) + "s" + std::to_string(step),
           "rank-" + std::to_string(lr), to);
    }
  }
  UseSecond(true);
  for (int lr : {0, 1}) {
    to.name = "rank_" + std::to_string(lr + 2) + ".pt";
    Save(lr, 5, "r" + std::to_string(lr + 2) + "s5", "rank-" + std::to_string(lr + 2), to);
  }
  to.name = "rank_2.pt";
  Save(0, 6, "r2s6", "rank-2", to);  // rank 3 died before its save of step 6

  int done = 0;
  UseSecond(false);
  service().PersistForExit([&] { ++done; });
  EXPECT_EQ(service().persists_in_flight(), 2) << "steps 6 and 5, newest first";
  ASSERT_TRUE(RunUntil([&] { return done == 1; }));
  EXPECT_FALSE(fs::exists(to.root + "/ftrun-step-5")) << "ranks 2 and 3 are not stored yet";
  EXPECT_FALSE(fs::exists(to.root + "/latest.txt"));
  UseSecond(true);
  service().PersistForExit([&] { ++done; });
  ASSERT_TRUE(RunUntil([&] { return done == 2; }));

  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(Shard(to, 5, rank), "r" + std::to_string(rank) + "s5");
  }
  EXPECT_FALSE(fs::exists(to.root + "/ftrun-step-6")) << "rank 3 never saved it";
  EXPECT_EQ(ReadFile(to.root + "/latest.txt"), "5");
  EXPECT_EQ(testing::PythonLatest(to.root),
            "(5, ['rank-0', 'rank-1', 'rank-2', 'rank-3'])\nexit=0");
  EXPECT_EQ(fs::canonical(to.path), fs::canonical(to.root + "/ftrun-step-5"));
  EXPECT_FALSE(fs::exists(StagingDir(to.root, 5))) << "removed once the step is complete";
}

TEST_F(FlashSharedTest, ReplicasOfTheOtherNodesShardsLetOneAgentStoreTheStepAlone) {
  Target to = Job(TargetIn("replicas"));
  for (int lr : {0, 1}) {
    to.name = "rank_" + std::to_string(lr) + ".pt";
    Save(lr, 8, "own " + std::to_string(lr), "rank-" + std::to_string(lr), to);
  }
  ReplicaStore replicas(64 << 20);
  for (int rank : {2, 3}) {
    std::string bytes = "replica " + std::to_string(rank);
    // Rank 2 named its shard file (sent with the copy); rank 3's came from an older sender.
    auto write =
        replicas.Begin("rank-" + std::to_string(rank), 8, bytes.size(), "node-b",
                       rank == 2 ? "model_optim_rng.pt" : "", rank == 2 ? dir_ / "mp_rank_02" : "");
    ASSERT_TRUE(write) << write.error().message;
    std::copy_n(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size(),
                write->data().begin());
    uint32_t crc = SnapshotChecksum(testing::AsBytes(bytes));
    ASSERT_TRUE(replicas.Finish(write->id, crc, crc));
  }
  service().SetReplicas(&replicas);  // the other agent was SIGKILLed: it writes nothing
  bool done = false;
  service().PersistForExit([&] { done = true; });
  ASSERT_TRUE(RunUntil([&] { return done; }));
  EXPECT_EQ(Shard(to, 8, 0), "own 0");
  const std::string step = to.root + "/ftrun-step-8/";
  EXPECT_EQ(ReadFile(step + PartDirName("rank-2") + "/model_optim_rng.pt"), "replica 2")
      << "named as its own rank named it, not after this node's shards";
  EXPECT_EQ(ReadFile(dir_ / "mp_rank_02" + "/model_optim_rng.pt"), "replica 2")
      << "with the link its own rank named";
  EXPECT_EQ(ReadFile(step + PartDirName("rank-3") + "/state.bin"), "replica 3")
      << "a copy without its name: the default name";
  EXPECT_EQ(ReadFile(to.root + "/latest.txt"), "8");
  EXPECT_EQ(testing::PythonLatest(to.root),
            "(8, ['rank-0', 'rank-1', 'rank-2', 'rank-3'])\nexit=0");
}

TEST_F(FlashSharedTest, AStepAlreadyCompleteOnStorageIsNotStagedAgain) {
  Target to = Job(TargetIn("done"));
  to.name = "rank_0.pt";
  Save(0, 3, "r0s3", "rank-0", to);
  fs::create_directories(to.root + "/ftrun-step-4");
  std::ofstream(to.root + "/ftrun-step-4/MANIFEST.json") << "{}";  // e.g. a DISK save's
  bool done = false;
  service().PersistForExit([&] { done = true; });
  ASSERT_TRUE(RunUntil([&] { return done; }));
  EXPECT_FALSE(fs::exists(StagingDir(to.root, 3)));
  EXPECT_FALSE(fs::exists(to.root + "/ftrun-step-3"));
}

// Shards stored together with other nodes' agents go by the job's start (SetJobRunStarted,
// from the rendezvous) once it is known: an earlier run's newer complete step (dated an hour
// back) then does not supersede this run's; before it, by this agent's own start, it does (a
// late-joined agent would otherwise take this run's earlier steps for an earlier run's).
class FlashSharedRunsTest : public FlashSharedTest {
 protected:
  Target EarlierStepNine() {
    run_started_ = std::chrono::system_clock::now() - std::chrono::seconds(2);
    Target to = Job(TargetIn("runs"));
    fs::create_directories(to.root + "/ftrun-step-9");
    std::ofstream(to.root + "/ftrun-step-9/MANIFEST.json") << "{}";
    fs::last_write_time(to.root + "/ftrun-step-9/MANIFEST.json",
                        fs::file_time_type::clock::now() - std::chrono::hours(1));
    to.name = "rank_0.pt";
    Save(0, 3, "r0s3", "rank-0", to);
    return to;
  }
  void PersistForExit() {
    bool done = false;
    service().PersistForExit([&] { done = true; });
    ASSERT_TRUE(RunUntil([&] { return done; }));
  }
};

TEST_F(FlashSharedRunsTest, BeforeTheJobsStartIsKnownAnEarlierRunsNewerStepSupersedes) {
  Target to = EarlierStepNine();
  PersistForExit();
  EXPECT_FALSE(fs::exists(StagingDir(to.root, 3))) << "the old rule: step 9 supersedes";
}

TEST_F(FlashSharedRunsTest, WithTheJobsStartAnEarlierRunsNewerStepDoesNotSupersede) {
  Target to = EarlierStepNine();
  service().SetJobRunStarted(run_started_);
  PersistForExit();
  EXPECT_TRUE(fs::exists(StagingDir(to.root, 3) + "/" + PartDirName("rank-0") + "/PART.json"))
      << "staged, waiting for the other node's shards";
}

}  // namespace
}  // namespace ftrun::launcher
