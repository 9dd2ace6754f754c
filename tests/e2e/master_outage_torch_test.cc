// A real torch.distributed (gloo) DDP job of 2 agents x 2 ranks whose rendezvous is
// `ftrun master`: the master is SIGKILLed mid-training and started again 2 s later on the same
// port. The new master takes the running round over: the job finishes in its first attempt
// (no restart), every step done once, the replicas equal.
#include <gtest/gtest.h>
#include <signal.h>

#include <thread>

#include "launcher/config/host.h"
#include "tests/e2e/torch_support.h"
#include "tests/support/test_support.h"

namespace ftrun::testing {
namespace {

using namespace std::chrono_literals;

// The newest step rank 0 completed ("<pid> <step>" lines), or -1.
int Progress(const std::string& path) {
  int step = -1;
  for (const auto& l : Lines(ReadFile(path))) {
    const auto sp = l.find(' ');
    if (sp != std::string::npos) step = std::atoi(l.c_str() + sp + 1);
  }
  return step;
}

TEST(MasterOutageTorchE2E, TwoSecondOutageMidTrainingCostsNoRestart) {
  ASSERT_TRUE(DebianTorchAvailable());
  TempDir dir;
  const std::string port = std::to_string(TestPort());
  const std::string conf = "last_call_timeout=1,keep_alive_interval=1,keep_alive_max_attempt=8";
  const std::vector<std::string> master_args = {"master", "--port",      port,  "--nnodes",
                                                "2",      "--rdzv-id",   "e2e", "--max-restarts",
                                                "1",      "--rdzv-conf", conf};
  auto master = std::make_unique<ChildRun>(FtrunBinary(), master_args);
  ASSERT_TRUE(WaitFor([&] { return master->Err().find("listening") != std::string::npos; }, 10s));
  std::vector<std::unique_ptr<ChildRun>> agents;
  for (int node = 0; node < 2; ++node) {
    agents.push_back(
        std::make_unique<ChildRun>(FtrunBinary(),
                                   std::vector<std::string>{"--nnodes",
                                                            "2",
                                                            "--nproc-per-node",
                                                            "2",
                                                            "--rdzv-backend",
                                                            "c10d",
                                                            "--rdzv-endpoint",
                                                            "127.0.0.1:" + port,
                                                            "--rdzv-id",
                                                            "e2e",
                                                            "--rdzv-conf",
                                                            conf + ",is_host=0",
                                                            "--log-dir",
                                                            dir / "logs",
                                                            SourceDir() + "/scripts/demo/train.py",
                                                            "--steps",
                                                            "60",
                                                            "--step-time",
                                                            "0.1",
                                                            "--out",
                                                            dir / "out",
                                                            "--progress",
                                                            dir / "progress"},
                                   std::map<std::string, std::string>{{"PYTHON_EXEC", kPython}}));
  }
  ASSERT_TRUE(WaitFor([&] { return Progress(dir / "progress") >= 10; }, 120s)) << agents[0]->Err();
  master->Signal(SIGKILL);
  master->Wait(10s);
  const int at_kill = Progress(dir / "progress");
  std::this_thread::sleep_for(2s);  // the outage
  master = std::make_unique<ChildRun>(FtrunBinary(), master_args);
  ASSERT_TRUE(WaitFor(
      [&] {
        return master->Err().find("round rebuilt from the rejoining nodes") != std::string::npos;
      },
      30s))
      << master->Err() << agents[0]->Err();
  for (auto& a : agents) {
    auto r = a->Wait(240s);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.err.find("restart requested"), std::string::npos) << r.err;
  }
  auto rm = master->Wait(30s);
  EXPECT_EQ(rm.exit_code, 0) << rm.err;
  EXPECT_LT(at_kill, 60) << "the master died while the workers trained";
  const std::string digest =
      ReadJson(dir / "out/result.0.json").fields().at("checksum").string_value();
  for (int rank = 0; rank < 4; ++rank) {
    auto res = ReadJson(dir / ("out/result." + std::to_string(rank) + ".json"));
    EXPECT_EQ(res.fields().at("steps").number_value(), 60);
    EXPECT_EQ(res.fields().at("attempt").number_value(), 0) << "no restart";
    EXPECT_EQ(res.fields().at("checksum").string_value(), digest) << "replicas diverged";
  }
}

}  // namespace
}  // namespace ftrun::testing
