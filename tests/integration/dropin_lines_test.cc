// Real start-script lines run for real (not only --dry-run): the script's own arguments reach
// every worker byte for byte after a flag, `ftrun torch.distributed.launch` gives the script
// --local_rank=N unless --use-env, single-node jobs without --master-port do not collide on a
// port, and the set-up errors a start script meets are one line with the right exit code.
#include <gtest/gtest.h>

#include <fstream>

#include "tests/support/test_support.h"

namespace ftrun::testing {
namespace {

using namespace std::chrono_literals;

// A training script that writes its arguments (one per line) and MASTER_PORT to
// <dir>/argv.<LOCAL_RANK> and <dir>/port.<LOCAL_RANK>, after sleeping `sleep` seconds.
class Recorder {
 public:
  Recorder() {
    std::ofstream(dir_ / "record.py")
        << "import os, sys, time\n"
           "d = os.path.dirname(os.path.abspath(__file__))\n"
           "r = os.environ['LOCAL_RANK']\n"
           "open(os.path.join(d, 'argv.' + r), 'w').write('\\n'.join(sys.argv[1:]))\n"
           "open(os.path.join(d, 'port.' + r), 'w').write(os.environ['MASTER_PORT'])\n"
           "time.sleep(float(os.environ.get('RECORD_SLEEP', '0')))\n";
  }
  std::string script() const { return dir_ / "record.py"; }
  std::vector<std::string> Argv(int local_rank) const {
    return Lines(ReadFile(dir_ / ("argv." + std::to_string(local_rank))));
  }
  std::string Port(int local_rank) const {
    return ReadFile(dir_ / ("port." + std::to_string(local_rank)));
  }

 private:
  TempDir dir_;
};

const std::map<std::string, std::string> kPython = {{"PYTHON_EXEC", "/usr/bin/python3"}};

TEST(DropinLines, ScriptArgumentsAfterAFlagReachEveryWorkerUnchanged) {
  Recorder rec;
  // A flag right before the script, and script arguments that abbreviate ftrun's options.
  auto r = RunFtrun(
      {"--nproc", "2", "--tee", "3", "--standalone", rec.script(), "--local-rank=${local_rank}",
       "--metrics", "acc", "--max", "3", "--run", "r1", "--log", "--master", "--", "x"},
      kPython);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (int rank : {0, 1}) {
    const std::vector<std::string> want = {"--local-rank=" + std::to_string(rank),
                                           "--metrics",
                                           "acc",
                                           "--max",
                                           "3",
                                           "--run",
                                           "r1",
                                           "--log",
                                           "--master",
                                           "--",
                                           "x"};
    EXPECT_EQ(rec.Argv(rank), want) << rank;
  }
}

TEST(DropinLines, DistributedLaunchPassesLocalRankUnlessUseEnv) {
  Recorder rec;
  auto r = RunFtrun({"torch.distributed.launch", "--nproc_per_node=2", rec.script(), "--lr", "1"},
                    kPython);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(rec.Argv(0), (std::vector<std::string>{"--local_rank=0", "--lr", "1"}));
  EXPECT_EQ(rec.Argv(1), (std::vector<std::string>{"--local_rank=1", "--lr", "1"}));
  Recorder env;
  r = RunFtrun(
      {"torch.distributed.launch", "--nproc_per_node=2", "--use_env", env.script(), "--lr", "1"},
      kPython);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(env.Argv(0), (std::vector<std::string>{"--lr", "1"}));
  EXPECT_EQ(env.Argv(1), (std::vector<std::string>{"--lr", "1"}));
}

TEST(DropinLines, SingleNodeJobsWithoutAMasterPortDoNotCollide) {
  Recorder a, b;
  auto env = kPython;
  env["RECORD_SLEEP"] = "1";
  ChildRun first(FtrunBinary(), {"--nproc-per-node", "2", a.script()}, env);
  ChildRun second(FtrunBinary(), {"--nproc-per-node", "2", b.script()}, env);
  auto r1 = first.Wait(60s), r2 = second.Wait(60s);
  ASSERT_EQ(r1.exit_code, 0) << r1.err;
  ASSERT_EQ(r2.exit_code, 0) << r2.err;
  EXPECT_EQ(a.Port(0), a.Port(1));
  EXPECT_NE(a.Port(0), b.Port(0));
  EXPECT_NE(a.Port(0), "29500");
}

TEST(DropinLines, SetUpErrorsAreOneLine) {
  struct Case {
    std::vector<std::string> argv;
    std::map<std::string, std::string> env;
    std::string err;
  };
  const std::vector<Case> cases = {
      {{"--nproc-per-node", "2", "--virtual-local-rank", "t.py"},
       {{"CUDA_VISIBLE_DEVICES", "4"}},
       "ftrun: error: --virtual-local-rank: 2 workers but CUDA_VISIBLE_DEVICES='4' lists 1 device "
       "(each worker gets its own; lower --nproc-per-node or list more devices)\n"},
      {{"t.py"},
       {{"PET_NNODES", "two"}},
       "ftrun: error: PET_NNODES (read for --nnodes): 'two' is not a number (expected N or "
       "MIN:MAX with 0 < MIN <= MAX)\n"},
      {{"--nnodes", "two", "t.py"},
       {{"PET_NNODES", "2"}},
       "ftrun: error: --nnodes: 'two' is not a number (expected N or MIN:MAX with 0 < MIN <= "
       "MAX)\n"},
      {{"t.py"},
       {{"PET_MASTER_PORT", "http"}},
       "ftrun: error: PET_MASTER_PORT (read for --master-port): 'http' is not an integer\n"},
      {{"t.py"},
       {{"PET_NODE_RANK", "-1"}},
       "ftrun: error: PET_NODE_RANK (read for --node-rank): must be >= 0, got -1\n"},
      {{"t.py"},
       {{"PET_RDZV_BACKEND", "zk"}},
       "ftrun: error: PET_RDZV_BACKEND (read for --rdzv-backend): unknown backend 'zk' (expected "
       "static, c10d, etcd, etcd-v2 or etcd-v3)\n"},
      {{"t.py"},
       {{"PET_MASTER_PORT", "70000"}},
       "ftrun: error: PET_MASTER_PORT (read for --master-port): 70000 is not a port number "
       "(0-65535)\n"},
      {{"--nnodes", "2", "--node-rank", "1", "t.py"},
       {{"PET_MASTER_ADDR", ""}},
       "ftrun: error: PET_MASTER_ADDR (read for --master-addr): must not be empty\n"},
      {{"t.py"},
       {{"PET_NNODES", ""}},
       "ftrun: error: PET_NNODES (read for --nnodes): '' is not a number (expected N or "
       "MIN:MAX with 0 < MIN <= MAX)\n"},
      {{"dlrover-run", "t.py"},
       {{"PET_NODE_RANK", "-2"}},
       "dlrover-run: error: PET_NODE_RANK (read for --node-rank): must be >= 0, got -2\n"},
      {{"--rdzv_id=", "--nnodes=2", "t.py"}, {}, "ftrun: error: --rdzv-id: must not be empty\n"},
      {{"master", "--port", "0", "--topology-file", "t"},
       {},
       "ftrun master: error: unrecognized arguments: --topology-file t (see ftrun master "
       "--help)\n"},
      {{"dlrover-run", "--bogus", "t.py"},
       {},
       "dlrover-run: error: unrecognized option '--bogus' (see dlrover-run --help)\n"},
      {{"torch.distributed.launch", "--no_python", "t"},
       {},
       "ftrun torch.distributed.launch: error: --no-python needs --use-env (a program run "
       "directly is not given --local_rank)\n"},
  };
  for (const auto& c : cases) {
    auto r = RunFtrun(c.argv, c.env);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(r.err, c.err);
  }
}

TEST(DropinLines, NoStandaloneWarningForPetRendezvousVariables) {
  Recorder rec;
  auto env = kPython;
  env["PET_RDZV_BACKEND"] = "c10d";
  env["PET_RDZV_ENDPOINT"] = "master:29400";
  env["PET_RDZV_ID"] = "job7";
  auto r = RunFtrun({"--standalone", rec.script()}, env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("ignoring"), std::string::npos) << r.err;
  r = RunFtrun({"--standalone", "--rdzv-id", "mine", rec.script()}, env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("--standalone: ignoring --rdzv-id mine"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace ftrun::testing
