// Fault-time checkpoints end to end: real torch DDP (gloo) training with ftrun's Python
// helper (scripts/demo/train.py). The data of a step depends only on (step, rank), so a run
// that loses no step ends with the same weights as the uninterrupted run.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>

#include "launcher/config/host.h"
#include "tests/e2e/torch_support.h"
#include "tests/support/test_support.h"

namespace ftrun::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr int kSteps = 30;

class FaultSave : public ::testing::Test {
 protected:
  // The uninterrupted run, once for every test.
  static void SetUpTestSuite() {
    TempDir dir;
    auto r = RunFtrun({"--nproc-per-node", "4", "--log-dir", dir / "logs", Train(), "--steps",
                       std::to_string(kSteps), "--out", dir / "clean"},
                      {{"PYTHON_EXEC", kPython}}, 120s);
    ASSERT_EQ(r.exit_code, 0) << "Debian's python3-torch is required: " << r.err;
    clean_ = new std::vector<double>(Weights(dir / "clean/result.0.json"));
  }
  static std::string Train() { return SourceDir() + "/scripts/demo/train.py"; }
  std::vector<std::string> Job(std::vector<std::string> ftrun_opts,
                               std::vector<std::string> train_opts) {
    std::vector<std::string> argv = {"--nproc-per-node", "4", "--log-dir", dir_ / "logs"};
    argv.insert(argv.end(), ftrun_opts.begin(), ftrun_opts.end());
    argv.insert(argv.end(), {Train(), "--steps", std::to_string(kSteps), "--out", dir_ / "out"});
    argv.insert(argv.end(), train_opts.begin(), train_opts.end());
    return argv;
  }
  std::map<std::string, std::string> Env() { return {{"PYTHON_EXEC", kPython}}; }
  void ExpectSameWeightsAsTheUninterruptedRun() {
    auto w = Weights(dir_ / "out/result.0.json");
    ASSERT_EQ(w.size(), clean_->size());
    for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(w[i], (*clean_)[i], 1e-9) << "weight " << i;
  }

  static std::vector<double>* clean_;
  TempDir dir_;
};
std::vector<double>* FaultSave::clean_ = nullptr;

TEST_F(FaultSave, RankKilledMidStepASurvivorSavesAndNoStepIsLost) {
  auto r = RunFtrun(Job({"--max-restarts", "1"}, {"--crash-rank", "1", "--crash-step", "17"}),
                    Env(), 180s);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  // The periodic checkpoint was at step 9; the fault-time save kept step 16.
  EXPECT_NE(r.err.find("saved step 16 (saver 0)"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("attempt 1: world_size=4 resuming at step 17"), std::string::npos) << r.out;
  EXPECT_TRUE(FileExists(dir_ / "out/checkpoints/ftrun-step-16/MANIFEST.json"));
  ExpectSameWeightsAsTheUninterruptedRun();
}

TEST_F(FaultSave, HungRankIsDetectedItsStacksDumpedAndNoStepIsLost) {
  auto r = RunFtrun(Job({"--max-restarts", "1", "--hang-timeout", "2"},
                        {"--hang-rank", "2", "--hang-step", "13"}),
                    Env(), 180s);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("rank(s) "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("reported no progress for 2s after step 12"), std::string::npos) << r.err;
  // The stacks are merged, not interleaved on the console: rank 2 sleeps in the script while
  // the others wait for it in a collective.
  EXPECT_EQ(r.err.find("(most recent call first)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("merged stacks: rank(s) 2 stuck where the others are not (0-1,3 at "),
            std::string::npos)
      << r.err;
  // The line of the script where the injected hang sleeps, read from the script itself.
  int hang_line = 0, n = 0;
  bool after_message = false;
  std::ifstream script(Train());
  for (std::string line; std::getline(script, line) && hang_line == 0;) {
    ++n;
    if (after_message && line.find("time.sleep(3600)") != std::string::npos) hang_line = n;
    after_message = line.find("injected hang at step") != std::string::npos;
  }
  ASSERT_GT(hang_line, 0) << "no time.sleep(3600) in " << Train();
  EXPECT_NE(r.err.find("train.py:" + std::to_string(hang_line) + " in main (report: "),
            std::string::npos)
      << r.err;
  int reports = 0;
  for (const auto& run : fs::directory_iterator(dir_ / "logs")) {
    if (!fs::is_directory(run.path() / "stacks")) continue;
    for (const auto& f : fs::directory_iterator(run.path() / "stacks")) {
      const std::string name = f.path().filename().string();
      if (name.rfind("hang-", 0) == 0 && f.path().extension() == ".txt") ++reports;
    }
  }
  EXPECT_EQ(reports, 1) << "one merged report next to the logs";
  EXPECT_NE(r.err.find("saved step 12"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("resuming at step 13"), std::string::npos) << r.out;
  ExpectSameWeightsAsTheUninterruptedRun();
}

TEST_F(FaultSave, SaveHandlerThatRaisesKeepsThePreviousCheckpoint) {
  auto r = RunFtrun(Job({"--max-restarts", "1"},
                        {"--crash-rank", "3", "--crash-step", "17", "--broken-save", "raise"}),
                    Env(), 180s);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("save of step 16 failed on rank 0: OSError: injected"), std::string::npos)
      << r.err;
  EXPECT_NE(r.out.find("resuming at step 10"), std::string::npos) << r.out;  // periodic one
  ExpectSameWeightsAsTheUninterruptedRun();
}

TEST_F(FaultSave, SaveHandlerThatHangsTimesOutAndTheRestartGoesAhead) {
  auto r = RunFtrun(Job({"--max-restarts", "1", "--save-timeout", "2"},
                        {"--crash-rank", "3", "--crash-step", "17", "--broken-save", "hang"}),
                    Env(), 180s);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("save of step 16 timed out after 2"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("resuming at step 10"), std::string::npos) << r.out;
  ExpectSameWeightsAsTheUninterruptedRun();
}

TEST_F(FaultSave, ASaverThatExitsWithoutAnsweringFailsTheSaveAtOnce) {
  // The save timeout is longer than the test's: the restart can only come from the exit.
  auto r = RunFtrun(Job({"--max-restarts", "1", "--save-timeout", "600"},
                        {"--crash-rank", "3", "--crash-step", "17", "--broken-save", "exit"}),
                    Env(), 180s);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("exited before it answered"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("resuming at step 10"), std::string::npos) << r.out;
  ExpectSameWeightsAsTheUninterruptedRun();
}

TEST_F(FaultSave, FtrunKilledDuringASaveTheResumeIgnoresThePartialDirectory) {
  ChildRun first(FtrunBinary(),
                 Job({"--max-restarts", "1"},
                     {"--crash-rank", "3", "--crash-step", "17", "--broken-save", "partial"}),
                 Env());
  ASSERT_TRUE(
      WaitFor([&] { return first.Out().find("fault-time save hangs") != std::string::npos; }, 120s))
      << first.Err();
  first.Signal(SIGKILL);
  first.Wait(30s);
  bool partial = false;
  for (const auto& e : fs::directory_iterator(dir_ / "out/checkpoints")) {
    partial |= e.path().filename().string().rfind(".ftrun-step-16.tmp-", 0) == 0;
  }
  EXPECT_TRUE(partial) << "the interrupted save should have left its temporary directory";
  // As a scheduler would: start the job again.
  auto again = RunFtrun(Job({}, {}), Env(), 180s);
  ASSERT_EQ(again.exit_code, 0) << again.out << again.err;
  EXPECT_NE(again.out.find("attempt 0: world_size=4 resuming at step 10"), std::string::npos)
      << again.out;
  ExpectSameWeightsAsTheUninterruptedRun();
}

TEST_F(FaultSave, WholeNodeLostThenBackSavesAndResumes) {
  const std::string port = std::to_string(TestPort());
  auto node = [&](int rank) {
    std::vector<std::string> argv = {"--nnodes",
                                     "2",
                                     "--node-rank",
                                     std::to_string(rank),
                                     "--master-port",
                                     port,
                                     "--nproc-per-node",
                                     "2",
                                     "--log-dir",
                                     dir_ / "logs",
                                     Train(),
                                     "--steps",
                                     std::to_string(kSteps),
                                     "--out",
                                     dir_ / "out",
                                     "--ckpt-every",
                                     "0",
                                     "--step-time",
                                     "0.15"};
    return std::make_unique<ChildRun>(FtrunBinary(), argv, Env());
  };
  auto n0 = node(0);
  auto n1 = node(1);
  ASSERT_TRUE(WaitFor([&] { return n0->Out().find("step 10/30") != std::string::npos; }, 120s))
      << n0->Err();
  n1->Signal(SIGKILL);  // the whole node: its agent, and with it its ranks
  n1->Wait(30s);
  ASSERT_TRUE(WaitFor([&] { return n0->Err().find("saved step") != std::string::npos; }, 60s))
      << n0->Err();
  n1 = node(1);  // the scheduler brings the node back
  auto r0 = n0->Wait(180s), r1 = n1->Wait(180s);
  ASSERT_EQ(r0.exit_code, 0) << r0.out << r0.err;
  ASSERT_EQ(r1.exit_code, 0) << r1.err;
  // Found lost by its dropped watch or, when no watch of that node was in flight (the
  // partition check's stop can answer it before the transport reports the node gone), by its
  // not watching again; not by the liveness timeout's silence.
  EXPECT_NE(r0.err.find("lost (disconnected"), std::string::npos) << r0.err;
  EXPECT_EQ(r0.out.find("resuming at step 0\n"), r0.out.rfind("resuming at step 0\n"))
      << "the second round resumed from the fault-time save, not from scratch: " << r0.out;
  ExpectSameWeightsAsTheUninterruptedRun();
}

}  // namespace
}  // namespace ftrun::testing
