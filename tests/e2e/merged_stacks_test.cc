// Merged stacks end to end: two agents on loopback (c10d, the first hosts the rendezvous),
// 2 ranks each, real torch.distributed (gloo). Rank 3 hangs in user code while ranks 0-2
// wait for it in all_reduce: --hang-timeout writes a merged report naming rank 3 (and 0-2 as
// the majority) with a flame graph, and `ftrun status --stacks` prints the same for a live
// job — also when the script never imports ftrun (the sitecustomize hook), and, for workers
// that are not Python at all, what there is.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>

#include "launcher/config/host.h"
#include "tests/e2e/torch_support.h"
#include "tests/support/test_support.h"

namespace ftrun::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class MergedStacks : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(DebianTorchAvailable()); }

  std::string Worker() const { return SourceDir() + "/tests/e2e/workers/hang_allreduce.py"; }

  // Two agents of 2 ranks each; `tail` is the entry point and its arguments.
  void StartJob(std::vector<std::string> ftrun_opts, std::vector<std::string> tail) {
    for (int node = 0; node < 2; ++node) {
      std::vector<std::string> argv = {
          "--nnodes",       "2",      "--nproc-per-node", "2",
          "--rdzv-backend", "c10d",   "--rdzv-endpoint",  endpoint_,
          "--rdzv-id",      "stacks", "--log-dir",        dir_ / LogDir(node)};
      argv.insert(argv.end(), ftrun_opts.begin(), ftrun_opts.end());
      argv.insert(argv.end(), tail.begin(), tail.end());
      agents_.push_back(std::make_unique<ChildRun>(
          FtrunBinary(), argv, std::map<std::string, std::string>{{"PYTHON_EXEC", kPython}}));
    }
  }
  static std::string LogDir(int node) { return "logs" + std::to_string(node); }

  // The merged reports (`ext`) under both agents' <log dir>/<run dir>/stacks/.
  std::vector<std::string> Reports(const std::string& prefix, const std::string& ext) const {
    std::vector<std::string> out;
    for (int node = 0; node < 2; ++node) {
      std::error_code ec;
      for (const auto& run : fs::directory_iterator(dir_ / LogDir(node), ec)) {
        for (const auto& f : fs::directory_iterator(run.path() / "stacks", ec)) {
          const std::string name = f.path().filename().string();
          if (name.rfind(prefix, 0) == 0 && f.path().extension() == ext) {
            out.push_back(f.path().string());
          }
        }
      }
    }
    return out;
  }

  // `ftrun status --stacks` until its report says `want` (the ranks need a moment to reach
  // their collective), or the deadline.
  RunResult StatusStacksUntil(const std::string& want, std::vector<std::string> extra = {}) {
    RunResult r;
    std::vector<std::string> argv = {"status", "--stacks", "--timeout", "8"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.push_back(endpoint_);
    WaitFor(
        [&] {
          r = RunFtrun(argv, {}, 30s);
          return r.out.find(want) != std::string::npos;
        },
        90s);
    return r;
  }

  void StopJob() {
    for (auto& a : agents_) a->Signal(SIGTERM);
    for (auto& a : agents_) a->Wait(60s);
  }

  TempDir dir_;
  std::string endpoint_ = "127.0.0.1:" + std::to_string(TestPort());
  std::vector<std::unique_ptr<ChildRun>> agents_;
};

TEST_F(MergedStacks, AHangOnTwoNodesNamesTheStuckRankInAMergedReportWithAFlameGraph) {
  StartJob({"--hang-timeout", "3", "--max-restarts", "0"},
           {Worker(), "--helper", "--hang-rank", "3", "--hang-step", "5"});
  // The hang is detected 3 s after rank 3 stopped; the report follows within the
  // collection's deadlines (bench.py measures how fast).
  std::vector<std::string> texts;
  ASSERT_TRUE(WaitFor(
      [&] {
        texts = Reports("hang-", ".txt");
        return !texts.empty();
      },
      120s))
      << agents_[0]->Err() << agents_[1]->Err();
  const std::string text = ReadFile(texts.front());
  EXPECT_NE(text.find("rank(s) 3 stuck where the others are not (0-2 at "), std::string::npos)
      << text;
  EXPECT_NE(text.find("hang_allreduce.py:19 in slow_step"), std::string::npos) << text;
  EXPECT_NE(text.find("in all_reduce"), std::string::npos) << text;
  EXPECT_NE(text.find("main thread of rank(s) 0-2 (3 of 4)"), std::string::npos) << text;
  EXPECT_NE(text.find("rank(s) 0-3"), std::string::npos) << "every rank of both nodes: " << text;
  // The flame graph next to it is well-formed XML.
  const std::string svg = texts.front().substr(0, texts.front().size() - 4) + ".svg";
  ASSERT_TRUE(FileExists(svg));
  auto parsed = RunFtrun({"--log-level", "error", "--no-python", kPython, "-c",
                          "import sys, xml.dom.minidom as m; d = m.parse(sys.argv[1]); "
                          "assert d.documentElement.tagName == 'svg'; print('xml ok')",
                          svg});
  EXPECT_NE(parsed.out.find("xml ok"), std::string::npos) << parsed.out << parsed.err;
  // The job fails (no restart left); the agent's failure names the stuck rank.
  for (auto& a : agents_) {
    auto r = a->Wait(120s);
    EXPECT_NE(r.exit_code, 0);
  }
  const std::string logs = agents_[0]->Err() + agents_[1]->Err();
  EXPECT_NE(logs.find("merged stacks: rank(s) 3 stuck where the others are not"), std::string::npos)
      << logs;
  EXPECT_EQ(logs.find("(most recent call first)"), std::string::npos) << "no raw dump on stderr";
}

TEST_F(MergedStacks, StatusStacksOfALiveJobWhoseScriptNeverImportsFtrun) {
  StartJob({}, {Worker(), "--hang-rank", "3", "--hang-step", "5", "--hung", dir_ / "hung"});
  ASSERT_TRUE(WaitFor([&] { return FileExists(dir_ / "hung"); }, 120s))
      << agents_[0]->Err() << agents_[1]->Err();
  auto r = StatusStacksUntil("rank(s) 3 stuck where the others are not (0-2 at ",
                             {"--stacks-dir", dir_ / "status"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("rank(s) 3 stuck where the others are not (0-2 at "), std::string::npos)
      << r.out << r.err;
  EXPECT_NE(r.out.find("hang_allreduce.py:19 in slow_step"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ftrun merged stacks: order "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(", rank(s) 0-3"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("merged stacks written to " + (dir_ / "status/status-")), std::string::npos)
      << r.err;
  // The job is still running.
  auto table = RunFtrun({"status", endpoint_}, {}, 30s);
  EXPECT_NE(table.out.find("running"), std::string::npos) << table.out << table.err;
  StopJob();
}

TEST_F(MergedStacks, StatusStacksOfWorkersThatAreNotPythonSaysWhatItHas) {
  StartJob({"--no-python"}, {"sleep", "300"});
  auto r = StatusStacksUntil("no Python stack from any of the 4 rank(s)");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("no Python stack from any of the 4 rank(s)"), std::string::npos)
      << r.out << r.err;
  EXPECT_NE(r.out.find("rank 3: no stack-dump handler"), std::string::npos) << r.out;
  // Nobody was killed by the dump signal: the job still runs.
  auto table = RunFtrun({"status", endpoint_}, {}, 30s);
  EXPECT_NE(table.out.find("running"), std::string::npos) << table.out << table.err;
  StopJob();
}

}  // namespace
}  // namespace ftrun::testing
