// The framework-level network check end to end: two agents on loopback with --comm-perf-test
// run the bundled scripts/checks/comm_check.py on their pair with real torch (Debian's
// python3-torch, gloo) before a real gloo job; a broken check environment fails the job
// before any worker starts, with the reason in the log.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "launcher/config/host.h"
#include "tests/e2e/torch_support.h"
#include "tests/support/test_support.h"

namespace ftrun::testing {
namespace {

using namespace std::chrono_literals;

class Preflight : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(DebianTorchAvailable());
    port_ = std::to_string(TestPort());
    std::filesystem::create_directories(dir_ / "out");
  }
  // One agent of a two-node job (one worker each) whose pair runs comm_check.py; the workers
  // write their environment and all-reduce with gloo (tests/e2e/workers/dump_env.py).
  std::vector<std::string> Agent() {
    return {"--log-dir",
            dir_ / "logs",
            "--nproc-per-node",
            "1",
            "--nnodes",
            "2",
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            "127.0.0.1:" + port_,
            "--rdzv-id",
            "preflight",
            "--rdzv-conf",
            "last_call_timeout=0.5",
            "--comm-perf-test",
            "--network-check-bytes",
            "1MiB",
            SourceDir() + "/tests/e2e/workers/dump_env.py",
            dir_ / "out"};
  }
  std::map<std::string, std::string> Env(const std::string& python = kPython) {
    return {{"PYTHON_EXEC", python}, {"FTRUN_CHECKS_DIR", SourceDir() + "/scripts/checks"}};
  }
  // Both agents, the first hosting the rendezvous.
  std::pair<RunResult, RunResult> RunPair(const std::map<std::string, std::string>& env) {
    ChildRun a(FtrunBinary(), Agent(), env);
    EXPECT_TRUE(WaitFor([&] { return a.Err().find("joined the job") != std::string::npos; }, 60s))
        << a.Err();
    ChildRun b(FtrunBinary(), Agent(), env);
    auto rb = b.Wait(240s);
    auto ra = a.Wait(60s);
    return {ra, rb};
  }
  TempDir dir_;
  std::string port_;
};

TEST_F(Preflight, CommCheckPassesAndTheGlooJobRuns) {
  auto [ra, rb] = RunPair(Env());
  ASSERT_EQ(ra.exit_code, 0) << ra.out << ra.err;
  ASSERT_EQ(rb.exit_code, 0) << rb.out << rb.err;
  // comm_check.py's JSON line, printed by its rank 0 (on the pair's listening node).
  const std::string out = ra.out + rb.out;
  EXPECT_NE(out.find("{\"rank\":0,\"world_size\":2,\"backend\":\"gloo\",\"matmul_ms\":"),
            std::string::npos)
      << out;
  EXPECT_EQ(ra.err.find("comm_check:"), std::string::npos) << ra.err;
  EXPECT_NE(ra.err.find("network check finished round=0: all nodes passed"), std::string::npos)
      << ra.err;
  // The workers ran after the check, as a job of two.
  for (const auto* f : {"env.0.json", "env.1.json"}) {
    EXPECT_TRUE(FileExists(dir_ / ("out/" + std::string(f)))) << f;
  }
}

TEST_F(Preflight, ABrokenCheckEnvironmentFailsThePairAndTheJob) {
  // A Python that cannot import torch (no site-packages): comm_check.py exits 2 on both nodes.
  const std::string python = dir_ / "python-without-torch";
  std::ofstream(python) << "#!/bin/sh\nexec " << kPython << " -S \"$@\"\n";
  ASSERT_EQ(::chmod(python.c_str(), 0755), 0);
  auto [ra, rb] = RunPair(Env(python));
  for (const auto* r : {&ra, &rb}) {
    EXPECT_EQ(r->exit_code, 1) << r->err;
    EXPECT_NE(r->err.find("comm_check: cannot import torch"), std::string::npos) << r->err;
    EXPECT_NE(r->err.find("FAILED: check command on "), std::string::npos) << r->err;
    EXPECT_NE(r->err.find(": exit code 2 after "), std::string::npos) << r->err;
    EXPECT_NE(r->err.find("job finished outcome=failed exit_code=1 reason=\"the network check "
                          "could not isolate the fault"),
              std::string::npos)
        << r->err;
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir_ / "out")) << "no worker started";
}

}  // namespace
}  // namespace ftrun::testing
