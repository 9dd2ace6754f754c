// TempStepDir and SweepAbandonedStepDirs: a step directory whose writer was killed mid-write
// (a real child process SIGKILLed) is removed by the next writer on this machine; nothing a
// live writer, another machine, an older format or a complete checkpoint holds is touched.
#include "launcher/checkpoint/temp_step_dir.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/support/test_support.h"
#include "tests/unit/launcher/checkpoint/snapshot_test_util.h"

namespace ftrun::launcher {
namespace {

namespace fs = std::filesystem;

class TempStepDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(BootId().empty()) << "the kernel gives no boot id";
    fs::create_directories(root_);
  }

  std::string KilledWriter(uint64_t step) { return testing::KilledTempStepDir(root_, step); }

  ftrun::testing::TempDir dir_;
  std::string root_ = dir_ / "ckpt";
};

TEST_F(TempStepDirTest, TheMarkerNamesThisBootAndIsGoneBeforeTheRename) {
  auto temp = TempStepDir::Make(root_, 7);
  ASSERT_TRUE(temp) << temp.error().message;
  EXPECT_EQ(fs::path(temp->path()).filename().string().rfind(".ftrun-step-7.tmp-", 0), 0u);
  EXPECT_EQ(ftrun::testing::ReadFile(temp->path() + "/.ftrun-writer"),
            BootId() + " " + std::to_string(getpid()) + "\n");
  temp->DropMarker();
  EXPECT_FALSE(fs::exists(temp->path() + "/.ftrun-writer"));
}

TEST_F(TempStepDirTest, AKilledWritersDirectoryIsRemovedAndALiveWritersKept) {
  const std::string killed = KilledWriter(5);
  ASSERT_TRUE(fs::exists(killed + "/part.bin"));
  auto live = TempStepDir::Make(root_, 6);  // this process, still writing
  ASSERT_TRUE(live);
  EXPECT_EQ(SweepAbandonedStepDirs(root_), std::vector<std::string>{killed});
  EXPECT_FALSE(fs::exists(killed));
  EXPECT_TRUE(fs::exists(live->path() + "/.ftrun-writer"));
}

TEST_F(TempStepDirTest, WhatItCannotProveAbandonedIsKept) {
  auto make = [&](const std::string& name, const std::string& marker) {
    fs::create_directories(root_ + "/" + name);
    if (!marker.empty()) std::ofstream(root_ + "/" + name + "/.ftrun-writer") << marker;
  };
  make(".ftrun-step-1.tmp-other-machine", "0f0e0d0c-0000-4000-8000-000000000001 12\n");
  make(".ftrun-step-2.tmp-checkpoint-py", "");          // no marker: checkpoint.py's
  make(".ftrun-step-3.tmp-being-made", std::string());  // marker not written yet
  std::ofstream(root_ + "/.ftrun-step-3.tmp-being-made/.ftrun-writer") << "";
  make("ftrun-step-4", BootId() + " 1\n");  // a complete checkpoint's name
  make(".ftrun-step-5.damaged-1-2", BootId() + " 1\n");
  fs::create_directories(root_ + "/.ftrun-step-6.tmp-link");
  fs::create_symlink("/proc/self/status", root_ + "/.ftrun-step-6.tmp-link/.ftrun-writer");
  fs::create_directory_symlink(KilledWriter(8), root_ + "/.ftrun-step-9.tmp-to-abandoned");
  const std::string before = testing::NamesIn(root_);
  // Only step 8's own directory, abandoned, goes; the link to it is not followed.
  auto removed = SweepAbandonedStepDirs(root_);
  ASSERT_EQ(removed.size(), 1u);
  EXPECT_EQ(fs::path(removed[0]).filename().string().rfind(".ftrun-step-8.tmp-", 0), 0u);
  std::string expected = before;
  const std::string gone = fs::path(removed[0]).filename().string() + " ";
  expected.erase(expected.find(gone), gone.size());
  EXPECT_EQ(testing::NamesIn(root_), expected);
}

// What a writer with this pid left under the next suffix (a restarted container's agent often
// gets its predecessor's pid) does not stop the next write.
TEST_F(TempStepDirTest, ANameTakenByALeftoverIsSkipped) {
  auto first = TempStepDir::Make(root_, 2);
  ASSERT_TRUE(first);
  const std::string name = fs::path(first->path()).filename().string();
  const long n = std::stol(name.substr(name.rfind('-') + 1));
  for (long k = n + 1; k <= n + 3; ++k) {
    fs::create_directories(root_ + "/" + name.substr(0, name.rfind('-') + 1) + std::to_string(k));
  }
  auto second = TempStepDir::Make(root_, 2);
  ASSERT_TRUE(second) << second.error().message;
  EXPECT_TRUE(fs::exists(second->path() + "/.ftrun-writer"));
}

TEST_F(TempStepDirTest, AMissingRootSweepsNothing) {
  EXPECT_TRUE(SweepAbandonedStepDirs(root_ + "/nowhere").empty());
}

}  // namespace
}  // namespace ftrun::launcher
