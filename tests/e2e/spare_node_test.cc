// Spare nodes end to end with real training: two agents train a torch DDP job (gloo), a third
// waits as a spare; a training node's agent is SIGKILLed (its workers die with it). The
// survivors' collectives fail before the node is declared lost, yet the loss is a membership
// change: the spare takes the lost node's place and the job finishes with --max-restarts 0,
// losing no step (the survivors' fault-time save) and ending with the weights of a run
// without faults.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>

#include "launcher/config/host.h"
#include "tests/e2e/torch_support.h"
#include "tests/support/test_support.h"

namespace ftrun::testing {
namespace {

using namespace std::chrono_literals;
using namespace std::string_literals;

constexpr int kSteps = 40;

int LastStep(const std::string& progress_file) {
  auto lines = Lines(ReadFile(progress_file));
  if (lines.empty()) return -1;
  return std::stoi(lines.back().substr(lines.back().find(' ') + 1));
}

// ftrun's demo script (fault-time save through the helper), or a plain torch script whose
// ranks exit 1 when a collective fails (so their failures reach the rendezvous first).
// One of the agents of a 2-node job on loopback that a third agent joins as a spare: 2 ranks,
// no restart to spend (a node loss must spend none), fast liveness.
std::vector<std::string> SpareJobAgent(const std::string& port, const std::string& run_id,
                                       const std::string& log_dir) {
  return {
      "--nproc-per-node", "2",
      "--nnodes",         "2",
      "--max-restarts",   "0",
      "--rdzv-backend",   "c10d",
      "--rdzv-endpoint",  "127.0.0.1:" + port,
      "--rdzv-id",        run_id,
      "--rdzv-conf",      "last_call_timeout=0.5,keep_alive_interval=0.5,keep_alive_max_attempt=4",
      "--log-dir",        log_dir};
}

std::vector<std::string> Train(bool plain, const std::string& out, const std::string& progress) {
  std::vector<std::string> a = {"--steps", std::to_string(kSteps), "--step-time", "0.05", "--out",
                                out};
  if (plain) {
    a.insert(a.begin(), SourceDir() + "/tests/e2e/workers/plain_ddp.py");
  } else {
    a.insert(a.begin(), SourceDir() + "/scripts/demo/train.py");
    for (const char* x : {"--global-batch", "32", "--ckpt-every", "0", "--progress"}) {
      a.push_back(x);
    }
    a.push_back(progress);
  }
  return a;
}

class SpareNode : public ::testing::TestWithParam<bool> {};

TEST_P(SpareNode, ANodeLossPromotesTheSpareAndSpendsNoRestart) {
  const bool plain = GetParam();
  TempDir dir;
  std::vector<std::string> clean_argv = {"--nproc-per-node", "4", "--log-dir", dir / "clean-logs"};
  for (const auto& a : Train(plain, dir / "clean", dir / "clean/progress")) clean_argv.push_back(a);
  auto clean = RunFtrun(clean_argv, {{"PYTHON_EXEC", kPython}}, 180s);
  ASSERT_EQ(clean.exit_code, 0) << "Debian's python3-torch is required: " << clean.err;

  const std::string port = std::to_string(TestPort());
  auto agent = [&](const std::string& name) {
    std::vector<std::string> argv = SpareJobAgent(port, "spare", dir / ("logs-" + name));
    for (const auto& a : Train(plain, dir / "out", dir / "out/progress")) argv.push_back(a);
    return std::make_unique<ChildRun>(FtrunBinary(), argv,
                                      std::map<std::string, std::string>{{"PYTHON_EXEC", kPython}});
  };
  auto a = agent("a");  // hosts the rendezvous: it starts first
  ASSERT_TRUE(WaitFor([&] { return a->Err().find("joined the job") != std::string::npos; }, 20s))
      << a->Err();
  auto b = agent("b");
  ASSERT_TRUE(WaitFor([&] { return LastStep(dir / "out/progress") >= 0; }, 120s)) << a->Err();
  auto spare = agent("spare");
  ASSERT_TRUE(
      WaitFor([&] { return spare->Err().find("joined the job") != std::string::npos; }, 20s))
      << spare->Err();
  ASSERT_TRUE(WaitFor([&] { return LastStep(dir / "out/progress") >= 12; }, 120s)) << a->Err();
  b->Signal(SIGKILL);  // the agent; its workers die with it (PR_SET_PDEATHSIG)
  b->Wait(10s);
  auto ra = a->Wait(180s);
  auto rs = spare->Wait(60s);
  EXPECT_EQ(ra.exit_code, 0) << ra.err;
  EXPECT_EQ(rs.exit_code, 0) << rs.err;
  // With --max-restarts 0 the job lives only if the loss spent no restart.
  EXPECT_NE(ra.err.find("round formed round=1 nodes=2 restart_count=0"), std::string::npos)
      << ra.err;
  if (plain) {
    // Either the survivors' failures came first and their restart was given back, or (a slow
    // machine) the loss was seen first and the failures were only listed.
    const bool given_back = ra.err.find("no restart spent") != std::string::npos;
    const bool loss_first = ra.err.find("round=0 reason=\"node ") != std::string::npos;
    EXPECT_TRUE(given_back || loss_first) << ra.err;
  } else {  // the survivors waited in guard() and saved the newest step
    EXPECT_NE(ra.err.find("saved step"), std::string::npos) << "no fault-time save: " << ra.err;
  }
  EXPECT_NE(rs.err.find("rank=2"), std::string::npos) << "the spare did not train: " << rs.err;
  auto w = Weights(dir / "out/result.0.json"), want = Weights(dir / "clean/result.0.json");
  ASSERT_EQ(w.size(), want.size());
  for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(w[i], want[i], 1e-9) << "weight " << i;
}

// Warm spares (--warm-restart): the spare's standbys (torch imported) are ready while it
// waits, before it is promoted, and its first workers start on them. (The suite's name keeps
// it out of the .warm copies: it sets --warm-restart itself.)
TEST(WarmRestartSpare, TheSparesStandbysAreReadyBeforeItsPromotionAndItsFirstStartIsWarm) {
  TempDir dir;
  const std::string port = std::to_string(TestPort());
  auto agent = [&](const std::string& name) {
    std::vector<std::string> argv = SpareJobAgent(port, "warm-spare", dir / ("logs-" + name));
    for (const std::string& a : {"--warm-restart"s, "--event-log"s, dir / ("events-" + name)}) {
      argv.push_back(a);
    }
    // Long enough for the spare's standbys to import torch before the job ends: on a loaded
    // machine the job waits at step 300 until they have.
    for (const std::string& a :
         {SourceDir() + "/tests/e2e/workers/plain_ddp.py", "--steps"s, "400"s, "--step-time"s,
          "0.05"s, "--out"s, dir / "out", "--hold"s, dir / "hold"}) {
      argv.push_back(a);
    }
    return std::make_unique<ChildRun>(FtrunBinary(), argv,
                                      std::map<std::string, std::string>{{"PYTHON_EXEC", kPython}});
  };
  std::ofstream(dir / "hold") << "300";
  auto a = agent("a");
  ASSERT_TRUE(WaitFor([&] { return a->Err().find("joined the job") != std::string::npos; }, 20s))
      << a->Err();
  auto b = agent("b");
  ASSERT_TRUE(WaitFor([&] { return LastStep(dir / "out/progress") >= 0; }, 120s)) << a->Err();
  auto spare = agent("spare");
  // Both standbys of the spare import torch and report ready while the round runs without it.
  auto ready = [&] {
    int n = 0;
    for (const auto& l : Lines(spare->Err())) n += l.find(" ready after ") != std::string::npos;
    return n;
  };
  ASSERT_TRUE(WaitFor([&] { return ready() >= 2; }, 120s)) << spare->Err();
  EXPECT_NE(spare->Err().find("waiting as a spare round=0"), std::string::npos) << spare->Err();
  EXPECT_EQ(spare->Err().find("round started"), std::string::npos) << "promoted too early";
  std::filesystem::remove(dir / "hold");
  b->Signal(SIGKILL);
  b->Wait(10s);
  auto ra = a->Wait(180s);
  auto rs = spare->Wait(60s);
  EXPECT_EQ(ra.exit_code, 0) << ra.err;
  ASSERT_EQ(rs.exit_code, 0) << rs.err;
  // Its only attempt started both ranks on the standbys prepared while it waited.
  for (const char* lr : {"local_rank=0 starts on standby", "local_rank=1 starts on standby"}) {
    EXPECT_NE(rs.err.find(lr), std::string::npos) << rs.err;
  }
  EXPECT_EQ(rs.err.find("starts cold"), std::string::npos) << rs.err;
  EXPECT_NE(rs.err.find("rank=2"), std::string::npos) << "the spare did not train: " << rs.err;
  EXPECT_NE(ReadFile(dir / "events-spare").find("\"event\":\"waiting_as_spare\""),
            std::string::npos);
  EXPECT_TRUE(FileExists(dir / "out/result.0.json"));
}

INSTANTIATE_TEST_SUITE_P(Scripts, SpareNode, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Plain" : "Helper"; });

}  // namespace
}  // namespace ftrun::testing
