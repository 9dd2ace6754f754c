// FlashService storing snapshots: at commit, for a failed job, sharded, pinned while written.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/unit/launcher/checkpoint/flash_service_fixture.h"

namespace ftrun::launcher {
namespace {

namespace fs = std::filesystem;
using ftrun::testing::ReadFile;
using FlashPersistTest = testing::FlashServiceTest;
using testing::GateSink;
using testing::Target;

TEST_F(FlashPersistTest, APersistWritesTheCheckpointAndPinsItsBuffer) {
  GateSink& gate = Gate();
  Target to = TargetIn("ckpt");
  to.persist = true;
  Save(0, 6, "six", "", to);
  EXPECT_EQ(service().persists_in_flight(), 1);
  ASSERT_TRUE(gate.WaitReached());  // written; the persister still holds step 6
  Save(0, 7, "seven");              // the other buffer
  // The next save would overwrite step 6's buffer: it takes a spare (it was refused, and a
  // kill right after lost that step), and the persist still reads "six".
  Save(0, 8, "eight");
  EXPECT_EQ(Steps(0), (std::vector<int64_t>{8, 7}));
  gate.Open();
  ASSERT_TRUE(Persisted());

  const std::string file = to.root + "/ftrun-step-6/group-all/state.bin";
  EXPECT_EQ(ReadFile(file), "six");
  EXPECT_TRUE(fs::exists(to.root + "/ftrun-step-6/MANIFEST.json"));
  EXPECT_EQ(ReadFile(to.root + "/latest.txt"), "6");
  ASSERT_TRUE(fs::is_symlink(to.path));
  EXPECT_EQ(fs::canonical(to.path), fs::canonical(file));
}

// Without room in the budget for a spare, a save that would overwrite a snapshot being
// persisted is refused as busy (the worker may wait and ask again), and nothing is handed out.
TEST_F(FlashPersistTest, ASaveWithNoRoomForASpareWhileAPersistReadsItsBufferIsBusy) {
  budget_ = 8;
  GateSink& gate = Gate();
  Target to = TargetIn("ckpt");
  to.persist = true;
  Save(0, 6, "six", "", to);
  ASSERT_TRUE(gate.WaitReached());
  Save(0, 7, "seven");
  const Sent& busy = Begin(0, 8, 3);
  EXPECT_EQ(busy.type(), "snapshot_refused");
  EXPECT_TRUE(busy.flag("busy"));
  EXPECT_EQ(Steps(0), (std::vector<int64_t>{7, 6})) << "a refused save hands nothing out";
  gate.Open();
  ASSERT_TRUE(Persisted());
  EXPECT_EQ(Begin(0, 8, 3).type(), "snapshot_lease") << "unpinned once the persist is done";
  EXPECT_EQ(ReadFile(to.root + "/ftrun-step-6/group-all/state.bin"), "six");
}

TEST_F(FlashPersistTest, ShardsArePersistedTogetherOnceAllAreHere) {
  Target to = TargetIn("sharded");
  to.world_size = 2;
  to.persist = true;
  Save(0, 5, "shard zero", "rank-0", to);
  EXPECT_EQ(service().persists_in_flight(), 0) << "rank-1's shard is missing";
  Save(1, 5, "shard one", "rank-1", to);
  ASSERT_TRUE(Persisted());
  const std::string step = to.root + "/ftrun-step-5/";
  EXPECT_EQ(ReadFile(step + PartDirName("rank-0") + "/state.bin"), "shard zero");
  EXPECT_EQ(ReadFile(step + PartDirName("rank-1") + "/state.bin"), "shard one");
  EXPECT_EQ(fs::canonical(to.path), fs::canonical(to.root + "/ftrun-step-5"))
      << "two files: the link is the step";
  // Step 6 of rank 0 alone is written nowhere.
  Save(0, 6, "shard zero again", "rank-0", to);
  EXPECT_EQ(service().persists_in_flight(), 0);
  EXPECT_FALSE(fs::exists(to.root + "/ftrun-step-6"));
}

TEST_F(FlashPersistTest, AShardsOwnLinkLeadsToItsDirectoryInTheStoredStep) {
  // One shard, one file: the step's link leads to the file, the shard's to its directory.
  Target to = TargetIn("linked");
  to.persist = true;
  to.part_link = dir_ / "mp_rank_00";
  Save(0, 5, "shard zero", "rank-0", to);
  ASSERT_TRUE(Persisted());
  EXPECT_EQ(ReadFile(to.path), "shard zero");
  EXPECT_EQ(ReadFile(to.part_link + "/state.bin"), "shard zero");
  // A link that is not an absolute path: the snapshot is kept and stored, no link is made.
  to = TargetIn("relative");
  to.persist = true;
  to.part_link = "mp_rank_00";
  Save(0, 6, "shard zero again", "rank-0", to);
  ASSERT_TRUE(Persisted());
  EXPECT_EQ(ReadFile(to.path), "shard zero again");
  EXPECT_FALSE(fs::exists("mp_rank_00"));
}

TEST_F(FlashPersistTest, AShardOfAWorldLargerThanThisNodeIsNotWaitedForNorLookedFor) {
  Target to = TargetIn("huge");
  to.world_size = 1 << 30;  // a broken or hostile worker: must not make the loop count to it
  to.persist = true;
  Save(0, 5, "shard zero", "rank-0", to);
  EXPECT_EQ(service().persists_in_flight(), 0);
  bool done = false;
  service().PersistForExit([&] { done = true; });
  EXPECT_EQ(service().persists_in_flight(), 1) << "its shard is staged for the other agents";
  EXPECT_TRUE(RunUntil([&] { return done; }));
  EXPECT_FALSE(fs::exists(to.root + "/ftrun-step-5"));
  EXPECT_TRUE(fs::exists(to.root + "/.ftrun-step-5.parts/" + PartDirName("rank-0") + "/PART.json"));
}

TEST_F(FlashPersistTest, AFailedJobWritesItsNewestSnapshotsOnce) {
  Target to = TargetIn("exit");
  Save(0, 2, "old");
  Save(0, 3, "newest", "", to);
  Save(1, 3, "no target");
  int done = 0;
  service().PersistForExit([&] { ++done; });
  EXPECT_EQ(service().persists_in_flight(), 1);
  ASSERT_TRUE(RunUntil([&] { return done == 1; }));
  EXPECT_EQ(service().persists_in_flight(), 0);
  EXPECT_EQ(ReadFile(to.root + "/ftrun-step-3/group-all/state.bin"), "newest");
  // Already stored: not written again, and `done` still runs (once).
  service().PersistForExit([&] { ++done; });
  EXPECT_EQ(service().persists_in_flight(), 0);
  ASSERT_TRUE(RunUntil([&] { return done == 2; }));
  io_.poll();
  EXPECT_EQ(done, 2);
}

// dlrover-run's --save-at-breakpoint: the same writes at each restart, the job going on.
TEST_F(FlashPersistTest, ABreakpointWritesTheNewestSnapshotsOnceAndTheJobGoesOn) {
  Target to = TargetIn("breakpoint");
  Save(0, 3, "three", "", to);
  service().PersistAtBreakpoint(/*one_copy=*/true);
  EXPECT_EQ(service().persists_in_flight(), 1);
  ASSERT_TRUE(Persisted());
  EXPECT_EQ(ReadFile(to.root + "/ftrun-step-3/group-all/state.bin"), "three");
  service().PersistAtBreakpoint(true);  // nothing newer: nothing written
  EXPECT_EQ(service().persists_in_flight(), 0);
  Save(0, 5, "five", "", to);  // the next round saves on
  service().PersistAtBreakpoint(true);
  ASSERT_TRUE(Persisted());
  EXPECT_EQ(ReadFile(to.root + "/ftrun-step-5/group-all/state.bin"), "five");
  bool done = false;
  service().PersistForExit([&] { done = true; });  // the failure after it: already stored
  EXPECT_EQ(service().persists_in_flight(), 0);
  ASSERT_TRUE(RunUntil([&] { return done; }));
}

// One node of a job writes the one copy (the others hold the same); shards that span nodes
// are left to the job's failure (their steps may differ between nodes at a breakpoint).
TEST_F(FlashPersistTest, ABreakpointWritesWhatThisNodeAloneStoresWhole) {
  Target copy = TargetIn("copy");
  Save(0, 3, "three", "", copy);
  Target spanning = TargetIn("spanning");
  spanning.world_size = 4;  // two local ranks here
  Save(1, 3, "rank 1 at 3", "rank-1", spanning);
  service().PersistAtBreakpoint(/*one_copy=*/false);
  EXPECT_EQ(service().persists_in_flight(), 0);
  EXPECT_FALSE(fs::exists(copy.root));
  EXPECT_FALSE(fs::exists(spanning.root));
  bool done = false;
  service().PersistForExit([&] { done = true; });  // the job's failure writes both
  ASSERT_TRUE(RunUntil([&] { return done; }));
  EXPECT_EQ(ReadFile(copy.root + "/ftrun-step-3/group-all/state.bin"), "three");
  EXPECT_TRUE(fs::exists(spanning.root + "/.ftrun-step-3.parts")) << "staged";
}

// As DLRover's saver, busy writing, skips a breakpoint: restarts never queue writes.
TEST_F(FlashPersistTest, ABreakpointWhileEarlierSnapshotsAreBeingWrittenWritesNothing) {
  GateSink& gate = Gate();
  Target disk = TargetIn("disk");
  disk.persist = true;
  Save(0, 6, "six", "", disk);
  ASSERT_TRUE(gate.WaitReached());  // being written
  Target other = TargetIn("other");
  Save(1, 7, "seven", "", other);  // a copy this node could store
  service().PersistAtBreakpoint(true);
  EXPECT_EQ(service().persists_in_flight(), 1);
  gate.Open();
  ASSERT_TRUE(Persisted());
  EXPECT_FALSE(fs::exists(other.root));
  service().PersistAtBreakpoint(true);  // the next breakpoint, nothing in flight: written
  ASSERT_TRUE(Persisted());
  EXPECT_EQ(ReadFile(other.root + "/ftrun-step-7/group-all/state.bin"), "seven");
}

TEST_F(FlashPersistTest, AStepPersistedAtCommitIsNotWrittenAgainAtExit) {
  Target to = TargetIn("twice");
  to.persist = true;
  Save(0, 4, "four", "", to);
  ASSERT_TRUE(Persisted());
  bool done = false;
  service().PersistForExit([&] { done = true; });
  EXPECT_EQ(service().persists_in_flight(), 0);
  ASSERT_TRUE(RunUntil([&] { return done; }));
}

TEST_F(FlashPersistTest, NothingToPersistAtExitStillFinishes) {
  int done = 0;
  service().PersistForExit([&] { ++done; });
  EXPECT_EQ(done, 0) << "runs on the loop, not inside the call";
  ASSERT_TRUE(RunUntil([&] { return done == 1; }));
  io_.poll();
  EXPECT_EQ(done, 1);
}

TEST_F(FlashPersistTest, AFailedJobWritesTheNewestStepEveryShardHolds) {
  Target to = TargetIn("behind");
  to.world_size = 2;
  Save(0, 5, "zero at 5", "rank-0", to);
  Save(1, 5, "one at 5", "rank-1", to);
  Save(0, 6, "zero at 6", "rank-0", to);  // rank 1 died before its save of step 6
  bool done = false;
  service().PersistForExit([&] { done = true; });
  ASSERT_TRUE(RunUntil([&] { return done; }));
  const std::string step = to.root + "/ftrun-step-5/";
  EXPECT_EQ(ReadFile(step + PartDirName("rank-0") + "/state.bin"), "zero at 5");
  EXPECT_EQ(ReadFile(step + PartDirName("rank-1") + "/state.bin"), "one at 5");
  EXPECT_FALSE(fs::exists(to.root + "/ftrun-step-6"));
}

TEST_F(FlashPersistTest, AFailedPersistIsTriedAgainAtExit) {
  Target to = TargetIn("file");
  std::ofstream(to.root) << "a file where the checkpoint directory should be";
  to.root += "/ckpt";
  to.persist = true;
  Save(0, 2, "two", "", to);
  ASSERT_EQ(service().persists_in_flight(), 1);
  ASSERT_TRUE(Persisted());
  bool done = false;
  service().PersistForExit([&] { done = true; });
  EXPECT_EQ(service().persists_in_flight(), 1) << "a step that was not stored is not stored";
  ASSERT_TRUE(RunUntil([&] { return done; }));
  EXPECT_FALSE(fs::exists(to.root));
}

TEST_F(FlashPersistTest, AFailedWriteIsAnsweredForItsDirectoryUntilANewerOneSucceeds) {
  auto failure = [&](const std::string& root) {
    v1::ControlSnapshotSteps r;
    r.set_id(99);
    r.set_root(root);
    service().Steps(0, r);
    return sent_.back();
  };
  Target to = TargetIn("blocked");
  const std::string dir = to.root;
  std::ofstream(dir) << "a file where the checkpoint directory should be";
  to.root += "/ckpt";
  to.persist = true;
  Save(0, 3, "three", "", to);
  ASSERT_TRUE(Persisted());
  const Sent& failed = failure(to.root);
  EXPECT_EQ(failed.at("persist_failed_step").number_value(), 3);
  EXPECT_NE(failed.at("persist_error").string_value().find(dir), std::string::npos)
      << failed.at("persist_error").string_value();
  EXPECT_FALSE(failure(TargetIn("elsewhere").root).json.fields().contains("persist_failed_step"))
      << "another directory's writes failed nothing";
  EXPECT_FALSE(failure("").json.fields().contains("persist_failed_step")) << "no root asked";

  fs::remove(dir);  // the directory can be made now: step 4 is stored
  Save(0, 4, "four", "", to);
  ASSERT_TRUE(Persisted());
  ASSERT_TRUE(fs::exists(to.root + "/ftrun-step-4"));
  EXPECT_FALSE(failure(to.root).json.fields().contains("persist_failed_step"));
}

}  // namespace
}  // namespace ftrun::launcher
