// End to end with real torch.distributed (Debian's python3-torch, gloo) under ftrun, and
// side by side with Debian's torchrun (through scripts/torchrun_compat.py).
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <regex>
#include <set>

#include "launcher/config/host.h"
#include "tests/e2e/torch_support.h"
#include "tests/support/test_support.h"

namespace ftrun::testing {
namespace {

namespace pb = google::protobuf;
using namespace std::chrono_literals;

std::string Str(const pb::Struct& s, const std::string& key) {
  auto it = s.fields().find(key);
  return it == s.fields().end() ? "<unset>" : it->second.string_value();
}

class TorchE2E : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(DebianTorchAvailable()); }
  std::string Train() const { return SourceDir() + "/scripts/demo/train.py"; }
  std::map<std::string, std::string> Env() const { return {{"PYTHON_EXEC", kPython}}; }
  TempDir dir_;
};

TEST_F(TorchE2E, DdpTrainingRunWithFourRanks) {
  auto r = RunFtrun({"--nproc-per-node", "4", "--log-dir", dir_ / "logs", Train(), "--steps", "30",
                     "--out", dir_ / "out"},
                    Env(), 120s);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::string digest = Str(ReadJson(dir_ / "out/result.0.json"), "checksum");
  for (int rank = 0; rank < 4; ++rank) {
    auto res = ReadJson(dir_ / ("out/result." + std::to_string(rank) + ".json"));
    EXPECT_EQ(res.fields().at("world_size").number_value(), 4);
    EXPECT_EQ(res.fields().at("steps").number_value(), 30);
    EXPECT_EQ(Str(res, "checksum"), digest) << "replicas diverged";
  }
  EXPECT_NE(r.out.find("done: 30 steps"), std::string::npos) << r.out;
}

TEST_F(TorchE2E, RankCrashesOnceAndTheJobCompletesWithTheSameWeights) {
  auto clean = RunFtrun({"--nproc-per-node", "4", "--log-dir", dir_ / "logs", Train(), "--steps",
                         "30", "--out", dir_ / "clean"},
                        Env(), 120s);
  ASSERT_EQ(clean.exit_code, 0) << clean.err;
  // Without the fault-time save (as under torchrun): resume from the periodic checkpoint.
  auto faulty = RunFtrun({"--nproc-per-node", "4", "--max-restarts", "1", "--fault-save", "off",
                          "--log-dir", dir_ / "logs", Train(), "--steps", "30", "--out",
                          dir_ / "faulty", "--crash-rank", "2", "--crash-step", "15"},
                         Env(), 120s);
  ASSERT_EQ(faulty.exit_code, 0) << faulty.out << faulty.err;
  EXPECT_NE(faulty.out.find("rank 2: injected crash at step 15"), std::string::npos);
  EXPECT_NE(faulty.out.find("attempt 1: world_size=4 resuming at step 10"), std::string::npos)
      << faulty.out;
  EXPECT_NE(faulty.err.find("failed (exitcode: -9) local_rank: 2"), std::string::npos);
  auto a = Weights(dir_ / "clean/result.0.json");
  auto b = Weights(dir_ / "faulty/result.0.json");
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-9) << "weight " << i;
  EXPECT_EQ(ReadJson(dir_ / "faulty/result.3.json").fields().at("attempt").number_value(), 1);
}

TEST_F(TorchE2E, WorkerEnvironmentMatchesTorchrunKeyByKey) {
  const std::vector<std::string> common = {"--nproc_per_node", "2",   "--max_restarts", "1",
                                           "--rdzv_id",        "e2e", "--role",         "trainer"};
  auto run = [&](const std::string& which) {
    std::string out = dir_ / which;
    std::filesystem::create_directories(out);
    std::vector<std::string> argv = common;
    argv.insert(argv.end(),
                {"--log_dir", out + "/logs", SourceDir() + "/tests/e2e/workers/dump_env.py", out});
    RunResult r;
    if (which == "torchrun") {
      argv.insert(argv.begin(), SourceDir() + "/scripts/torchrun_compat.py");
      ChildRun child(kPython, argv, Env(), {"OMP_NUM_THREADS", "LOGLEVEL"});
      r = child.Wait(120s);
    } else {
      ChildRun child(FtrunBinary(), argv, Env(), {"OMP_NUM_THREADS", "LOGLEVEL"});
      r = child.Wait(120s);
    }
    EXPECT_EQ(r.exit_code, 0) << which << ": " << r.err;
    return out;
  };
  std::string t = run("torchrun"), f = run("ftrun");
  const std::map<std::string, std::string> parent = {{"PYTHON_EXEC", kPython}};
  for (int rank = 0; rank < 2; ++rank) {
    auto te = ReadJson(t + "/env." + std::to_string(rank) + ".json");
    auto fe = ReadJson(f + "/env." + std::to_string(rank) + ".json");
    std::set<std::string> keys;
    for (const auto& [k, v] : te.fields()) keys.insert(k);
    for (const auto& [k, v] : fe.fields()) keys.insert(k);
    for (const std::string& k : keys) {
      const std::string tv = Str(te, k), fv = Str(fe, k);
      if (k == "MASTER_PORT") {
        // By design: the agent store's own port, not --master-port, which is the agent's
        // rendezvous (see ftrun(1)). Both agents host the workers' store there.
        EXPECT_EQ(tv, "29500");
        EXPECT_NE(fv, "29500");
      } else if (k == "TORCHELASTIC_ERROR_FILE") {
        std::string tail =
            "/logs/e2e_[a-z0-9_]{8}/attempt_0/" + std::to_string(rank) + "/error.json";
        EXPECT_TRUE(std::regex_match(tv, std::regex(t + tail))) << tv;
        EXPECT_TRUE(std::regex_match(fv, std::regex(f + tail))) << fv;
      } else if (k == "TORCH_NCCL_ASYNC_ERROR_HANDLING" || k == "TORCHELASTIC_SIGNALS_TO_HANDLE" ||
                 // ftrun's control channel (not FTRUN_WARM_RESTART & co. inherited by both)
                 (k.rfind("FTRUN_", 0) == 0 && std::getenv(k.c_str()) == nullptr)) {
        EXPECT_EQ(tv, "<unset>") << k;  // set by newer torchrun versions only
        EXPECT_NE(fv, "<unset>") << k;
      } else {
        EXPECT_EQ(tv, fv) << "rank " << rank << " " << k;
      }
    }
  }
}

TEST_F(TorchE2E, ModuleAndRunPathEntryPoints) {
  auto m = RunFtrun({"--log-dir", dir_ / "logs", "-m", "json.tool", "--help"}, Env(), 60s);
  EXPECT_EQ(m.exit_code, 0) << m.err;
  EXPECT_NE(m.out.find("usage:"), std::string::npos) << m.out;
  std::filesystem::create_directories(dir_ / "rp");
  auto r = RunFtrun({"--nproc-per-node", "2", "--log-dir", dir_ / "logs", "--run-path",
                     SourceDir() + "/tests/e2e/workers/dump_env.py", dir_ / "rp"},
                    Env(), 120s);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Str(ReadJson(dir_ / "rp/env.1.json"), "RANK"), "1");
}

// Two agents of two ranks each: gloo all_reduce over WORLD_SIZE 4 (dump_env.py asserts the
// sum), with the static and the dynamic rendezvous.
TEST_F(TorchE2E, TwoAgentsTimesTwoRanksAllReduce) {
  std::string port = std::to_string(TestPort());
  const std::vector<std::vector<std::string>> shapes = {
      {"--nnodes", "2", "--master-addr", "127.0.0.1", "--master-port", port},
      {"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:" + port,
       "--rdzv-id", "e2e"},
  };
  for (size_t shape = 0; shape < shapes.size(); ++shape) {
    std::string out = dir_ / ("shape" + std::to_string(shape));
    std::filesystem::create_directories(out);
    std::vector<std::unique_ptr<ChildRun>> agents;
    for (int node = 0; node < 2; ++node) {
      std::vector<std::string> argv = shapes[shape];
      if (shape == 0) argv.insert(argv.end(), {"--node-rank", std::to_string(node)});
      argv.insert(argv.end(), {"--nproc-per-node", "2", "--log-dir", dir_ / "logs",
                               SourceDir() + "/tests/e2e/workers/dump_env.py", out});
      agents.push_back(std::make_unique<ChildRun>(FtrunBinary(), argv, Env()));
    }
    for (auto& a : agents) {
      auto r = a->Wait(120s);
      EXPECT_EQ(r.exit_code, 0) << "shape " << shape << ": " << r.err;
    }
    for (int rank = 0; rank < 4; ++rank) {
      auto env = ReadJson(out + "/env." + std::to_string(rank) + ".json");
      EXPECT_EQ(Str(env, "WORLD_SIZE"), "4");
      EXPECT_EQ(Str(env, "GROUP_WORLD_SIZE"), "2");
    }
  }
}

TEST_F(TorchE2E, FileTimerWatchdogKillsAnOverrunningWorker) {
  auto r = RunFtrun({"--nproc-per-node", "2", "--log-dir", dir_ / "logs",
                     SourceDir() + "/tests/e2e/workers/watchdog.py"},
                    {{"PYTHON_EXEC", kPython},
                     {"TORCHELASTIC_ENABLE_FILE_TIMER", "1"},
                     {"TORCHELASTIC_TIMER_FILE", dir_ / "watchdog.fifo"}},
                    120s);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.out.find("rank 0 finished its step"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("rank 1 finished"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("watchdog: timer scope=step expired"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("  rank      : 1 (local_rank: 1)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Signal 9 (SIGKILL)"), std::string::npos) << r.err;
  EXPECT_FALSE(FileExists(dir_ / "watchdog.fifo"));
}

}  // namespace
}  // namespace ftrun::testing
