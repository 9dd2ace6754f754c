// dlrover-run: workers' environment, warnings, agents on loopback, usage errors, the symlink.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "tests/integration/dlrover_run_fixture.h"

namespace ftrun::testing {
namespace {

using namespace std::chrono_literals;

// ---- the workers' environment ----

TEST_F(DlroverRun, WorkersRunAsDlroverTrainerWithTheElasticJobNameAsRunId) {
  auto r =
      Run(Cmd({"--nproc-per-node", "2", "--tee", "3"}, {"env", dir_ / "env", "print", "hello"}),
          {{"ELASTIC_JOB_NAME", "llama-pretrain"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (int rank = 0; rank < 2; ++rank) {
    auto env = WorkerEnv("env", rank);
    EXPECT_EQ(env["ROLE_NAME"], "dlrover-trainer") << rank;
    EXPECT_EQ(env["TORCHELASTIC_RUN_ID"], "llama-pretrain") << rank;
    EXPECT_EQ(env.count("HCCL_IF_BASE_PORT"), 0u) << "only with --accelerator ascend-npu";
  }
  EXPECT_TRUE(Has(r.out, "[dlrover-trainer0]:hello")) << r.out;
  EXPECT_TRUE(Has(r.out, "[dlrover-trainer1]:hello")) << r.out;
  EXPECT_TRUE(Has(r.err, "run_id=llama-pretrain")) << r.err;

  // As DLRover's run(): the job's name and dlrover-trainer over the command line's, and over
  // --standalone's random run id; each override said once.
  auto own = Run(Cmd({"--rdzv-id", "mine", "--role", "actor"}, {"env", dir_ / "own"}),
                 {{"ELASTIC_JOB_NAME", "llama-pretrain"}});
  ASSERT_EQ(own.exit_code, 0) << own.err;
  EXPECT_EQ(WorkerEnv("own")["TORCHELASTIC_RUN_ID"], "llama-pretrain");
  EXPECT_EQ(WorkerEnv("own")["ROLE_NAME"], "dlrover-trainer");
  EXPECT_EQ(Occurrences(own.err, "--rdzv-id mine: the run id is ELASTIC_JOB_NAME"), 1) << own.err;
  EXPECT_EQ(Occurrences(own.err, "--role actor: dlrover-run's workers are always"), 1) << own.err;
  auto alone =
      Run(Cmd({"--standalone"}, {"env", dir_ / "alone"}), {{"ELASTIC_JOB_NAME", "llama-pretrain"}});
  ASSERT_EQ(alone.exit_code, 0) << alone.err;
  EXPECT_EQ(WorkerEnv("alone")["TORCHELASTIC_RUN_ID"], "llama-pretrain");
  EXPECT_FALSE(Has(alone.err, "ignoring")) << alone.err;
}

TEST_F(DlroverRun, AscendTrainingPortMustBeAPort) {
  auto r = Run(Cmd({"--accelerator", "ascend-npu", "--training-port", "70000"}));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(Lines(r.err).size(), 1u) << r.err;
  EXPECT_TRUE(Has(r.err, "dlrover-run: error: --training-port: 70000")) << r.err;
}

TEST_F(DlroverRun, AscendHcclPortAlreadySetIsKept) {
  auto r =
      Run(Cmd({"--accelerator", "ascend-npu", "--training-port", "61234"}, {"env", dir_ / "env"}),
          {{"HCCL_IF_BASE_PORT", "50000"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(WorkerEnv("env")["HCCL_IF_BASE_PORT"], "50000");
  // Other accelerators leave it alone.
  auto nv = Run(Cmd({"--training-port", "61234"}, {"env", dir_ / "nv"}));
  ASSERT_EQ(nv.exit_code, 0) << nv.err;
  EXPECT_EQ(WorkerEnv("nv").count("HCCL_IF_BASE_PORT"), 0u);
}

// ---- warnings: each exactly once, and the job still runs ----

TEST_F(DlroverRun, EachWarningOnceAndTheJobRuns) {
  const bool gpu = HostHasGpu();
  auto r = Run(Cmd({"--nproc-per-node", "2", "--auto-tunning", "--save-at-breakpoint",
                    "--ucp-device-type", "gpu", "--numa-affinity"},
                   {"record", dir_ / "records"}),
               {{"DLROVER_TRAINING_ELASTIC_MODE", "ucp"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Records().size(), 2u) << r.err;
  EXPECT_EQ(Count("role=dlrover-trainer"), 2);
  for (const char* w : {"--auto-tunning needs DLRover's job master",
                        "--ucp-device-type gpu: ftrun does not convert"}) {
    EXPECT_EQ(Occurrences(r.err, w), 1) << w << "\n" << r.err;
  }
  if (!gpu) {
    EXPECT_EQ(Occurrences(r.err, "--numa-affinity: no NVIDIA GPU"), 1) << r.err;
  }
  // Every warning is one [warning] line: none repeats under another wording.
  int warnings = Occurrences(r.err, "[warning]");
  int omp = Occurrences(r.err, "OMP_NUM_THREADS");  // torchrun's banner with 2 ranks
  EXPECT_EQ(warnings, 2 + (gpu ? 0 : 1) + omp) << r.err;
}

TEST_F(DlroverRun, SeveralNodesWithoutMasterAddrWarnOnceAndUseTheStaticRendezvous) {
  std::vector<std::unique_ptr<ChildRun>> agents;
  for (int rank : {1, 0}) {
    agents.push_back(Start(Cmd({"--nnodes", "2", "--node-rank", std::to_string(rank),
                                "--master-port", port_, "--nproc-per-node", "1"},
                               {"record", dir_ / "records"})));
  }
  for (auto& a : agents) {
    auto r = a->Wait(30s);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(Occurrences(r.err,
                          "DLROVER_MASTER_ADDR is not set; using torchrun's static "
                          "rendezvous at --master-addr 127.0.0.1:" +
                              port_),
              1)
        << r.err;
    EXPECT_TRUE(Has(r.err, "rdzv_backend=static")) << r.err;
  }
  EXPECT_EQ(Count("world=2"), 2) << ReadFile(dir_ / "records");
  EXPECT_EQ(Count("group=1 world=2"), 1);
}

// ---- several agents on loopback ----

TEST_F(DlroverRun, GroupRanksFollowNodeRankNotJoiningOrder) {
  // As DLRover's master sorts its nodes: NODE_RANK 1 joins first (and hosts the rendezvous),
  // NODE_RANK 0 still gets group rank 0 and global rank 0.
  auto opts = [&](const std::string& records) {
    return Cmd({"--nnodes", "2", "--nproc-per-node", "1", "--rdzv-conf", kFastConf},
               {"record", dir_ / records});
  };
  const std::string master = "127.0.0.1:" + port_;
  auto one = Start(opts("one"), {{"DLROVER_MASTER_ADDR", master}, {"NODE_RANK", "1"}});
  ASSERT_TRUE(WaitFor([&] { return Has(one->Err(), "joined the job"); }, 20s)) << one->Err();
  auto zero = Start(opts("zero"), {{"DLROVER_MASTER_ADDR", master}, {"NODE_RANK", "0"}});
  RunResult r1 = one->Wait(30s), r0 = zero->Wait(30s);
  ASSERT_EQ(r1.exit_code, 0) << r1.err;
  ASSERT_EQ(r0.exit_code, 0) << r0.err;
  EXPECT_TRUE(Has(ReadFile(dir_ / "zero"), "rank=0 local=0 group=0 world=2")) << r0.err;
  EXPECT_TRUE(Has(ReadFile(dir_ / "one"), "rank=1 local=0 group=1 world=2")) << r1.err;
}

TEST_F(DlroverRun, NodeUnitTwoFormsARoundOfTwoAndTheThirdWaits) {
  const std::map<std::string, std::string> env = {{"DLROVER_MASTER_ADDR", "127.0.0.1:" + port_},
                                                  {"ELASTIC_JOB_NAME", "unit"}};
  auto opts = Cmd(
      {"--nnodes", "1:4", "--node-unit", "2", "--nproc-per-node", "2", "--rdzv-conf", kFastConf},
      {"record", dir_ / "records", "wait-file", dir_ / "done"});
  auto a = Start(opts, env);  // the first one hosts the rendezvous at DLROVER_MASTER_ADDR
  ASSERT_TRUE(WaitFor([&] { return Has(a->Err(), "joined the job"); }, 20s)) << a->Err();
  EXPECT_TRUE(Has(a->Err(), "starting nnodes=2:4")) << "MIN is raised to one unit: " << a->Err();
  EXPECT_TRUE(Has(a->Err(), "rdzv_backend=c10d")) << a->Err();
  auto b = Start(opts, env);
  auto c = Start(opts, env);
  ASSERT_TRUE(WaitFor([&] { return Count("world=4") == 4; }, 20s))
      << a->Err() << b->Err() << c->Err();
  ASSERT_TRUE(WaitFor(
      [&] {
        int joined = 0;
        for (auto* x : {a.get(), b.get(), c.get()}) joined += Has(x->Err(), "joined the job");
        return joined == 3;
      },
      20s))
      << c->Err();
  EXPECT_TRUE(Has(a->Err(), "round formed round=0 nodes=2")) << a->Err();
  // The third waits for a second unit below MAX: "waiting", never a spare (log, status).
  ASSERT_TRUE(WaitFor(
      [&] {
        int waiting = 0;
        for (auto* x : {a.get(), b.get(), c.get()}) waiting += Has(x->Err(), "waiting round=0");
        return waiting == 1;
      },
      20s))
      << a->Err() << b->Err() << c->Err();
  for (auto* x : {a.get(), b.get(), c.get()}) {
    EXPECT_FALSE(Has(x->Err(), "waiting as a spare")) << x->Err();
  }
  auto status = RunFtrun({"status", "127.0.0.1:" + port_}, {}, 10s);
  EXPECT_EQ(status.exit_code, 0) << status.err;
  int waiting_lines = 0;
  for (const auto& l : Lines(status.out)) {
    waiting_lines += Has(l, " waiting ");
    EXPECT_FALSE(Has(l, " spare ")) << status.out;
  }
  EXPECT_EQ(waiting_lines, 1) << status.out;
  std::ofstream(dir_ / "done") << "";
  std::vector<RunResult> results = {a->Wait(30s), b->Wait(30s), c->Wait(30s)};
  int ran = 0;
  for (const auto& r : results) {
    EXPECT_EQ(r.exit_code, 0) << r.err;
    ran += Has(r.err, "round started");
  }
  EXPECT_EQ(ran, 2) << "one agent waited for a second unit to come";
  EXPECT_EQ(Records().size(), 4u) << ReadFile(dir_ / "records");
  EXPECT_EQ(Count("world=4"), 4);
}

TEST_F(DlroverRun, NodeUnitNotDividingMaxIsAUsageError) {
  auto r = Run(Cmd({"--node-unit", "3", "--nnodes", "4"}),
               {{"DLROVER_MASTER_ADDR", "127.0.0.1:" + port_}});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(Lines(r.err).size(), 1u) << r.err;
  EXPECT_TRUE(Has(r.err, "dlrover-run: error: --node-unit 3")) << r.err;
}

TEST_F(DlroverRun, AutoConfigTakesTheNodeCountFromNodeNum) {
  const std::map<std::string, std::string> env = {{"DLROVER_MASTER_ADDR", "127.0.0.1:" + port_},
                                                  {"NODE_NUM", "2"}};
  auto opts = Cmd({"--auto-config", "--nproc-per-node", "1", "--rdzv-conf", kFastConf},
                  {"record", dir_ / "records"});
  auto runs = RunTwoAgents(opts, env);
  ASSERT_EQ(runs.size(), 2u);
  for (const auto* r : {&runs[0], &runs[1]}) {
    EXPECT_EQ(r->exit_code, 0) << r->err;
    EXPECT_TRUE(Has(r->err, "starting nnodes=2:2")) << r->err;
    EXPECT_TRUE(Has(r->err, "group_world_size=2")) << r->err;
  }
  if (!HostHasGpu()) {
    EXPECT_EQ(Records().size(), 2u) << ReadFile(dir_ / "records");
  }
  EXPECT_EQ(Count("group=0 "), Count("group=1 ")) << ReadFile(dir_ / "records");

  // Without NODE_NUM, --nnodes as given (1): DLRover's rule.
  auto kept = Run(Cmd({"--auto-config", "--nproc-per-node", "1"}, {"exit", "0"}),
                  {{"DLROVER_MASTER_ADDR", "127.0.0.1:" + port_}});
  EXPECT_EQ(kept.exit_code, 0) << kept.err;
  EXPECT_TRUE(Has(kept.err, "starting nnodes=1:1")) << kept.err;
}

TEST_F(DlroverRun, PrecheckOneRunsTheNetworkCheckBeforeTheWorkers) {
  const std::map<std::string, std::string> env = {{"DLROVER_MASTER_ADDR", "127.0.0.1:" + port_}};
  auto opts = Cmd({"--nnodes", "2", "--precheck", "1", "--nproc-per-node", "1",
                   "--network-check-bytes", "1MiB", "--rdzv-conf", kFastConf},
                  {"record", dir_ / "records"});
  auto runs = RunTwoAgents(opts, env);
  ASSERT_EQ(runs.size(), 2u);
  for (const auto* r : {&runs[0], &runs[1]}) {
    EXPECT_EQ(r->exit_code, 0) << r->err;
    // The table (header, the pair, both nodes, the median) in every agent's log, and the
    // workers only after it.
    const size_t table = r->err.find("a->b MB/s  b->a MB/s   rtt ms  result");
    ASSERT_NE(table, std::string::npos) << r->err;
    EXPECT_EQ(Occurrences(r->err, " MB/s  healthy"), 2) << r->err;
    EXPECT_TRUE(Has(r->err, "median ")) << r->err;
    EXPECT_GT(r->err.find("round started"), table) << r->err;
  }
  EXPECT_EQ(Count("world=2"), 2) << ReadFile(dir_ / "records");
}

// ---- usage errors ----

TEST_F(DlroverRun, BadChoicesAreOneLineUsageErrors) {
  for (const auto& [opt, value] : std::vector<std::pair<std::string, std::string>>{
           {"--precheck", "3"}, {"--accelerator", "tpu"}}) {
    auto r = Run(Cmd({opt, value}));
    EXPECT_EQ(r.exit_code, 2) << opt << ": " << r.err;
    ASSERT_EQ(Lines(r.err).size(), 1u) << opt << ": " << r.err;
    EXPECT_EQ(r.err.rfind("dlrover-run: error: " + opt, 0), 0u) << r.err;
    EXPECT_TRUE(Has(r.err, value)) << r.err;
    EXPECT_FALSE(FileExists(dir_ / "logs")) << "nothing started";
  }
}

// ---- invoked through a symlink named dlrover-run ----

TEST_F(DlroverRun, SymlinkNamedDlroverRunIsThePersonality) {
  const std::string link = dir_ / "dlrover-run";
  std::filesystem::create_symlink(FtrunBinary(), link);
  auto help = Start({"--help"}, {}, link)->Wait(30s);
  EXPECT_EQ(help.exit_code, 0) << help.err;
  EXPECT_TRUE(Has(help.out, "usage: dlrover-run")) << help.out;
  EXPECT_TRUE(Has(help.out, "--node-unit")) << help.out;
  EXPECT_TRUE(Has(help.out, "--precheck")) << help.out;

  auto argv = Cmd({"--nproc-per-node", "2", "--node-unit", "1", "--precheck", "0"},
                  {"record", dir_ / "records"});
  argv.erase(argv.begin());  // no "dlrover-run" word: the name says it
  auto run = Start(argv, {{"ELASTIC_JOB_NAME", "linked"}}, link)->Wait(30s);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(Count("role=dlrover-trainer"), 2) << ReadFile(dir_ / "records");
  EXPECT_TRUE(Has(run.err, "run_id=linked")) << run.err;

  auto bad = Start({"--precheck", "3", "x.py"}, {}, link)->Wait(30s);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(bad.err.rfind("dlrover-run: error: --precheck", 0), 0u) << bad.err;

  // Plain ftrun speaks torchrun's command line: DLRover's options are usage errors.
  for (const char* o : {"--node-unit", "--precheck", "--auto-config"}) {
    auto plain = Start({o, "2", "--no-python", FakeWorkerBinary()})->Wait(30s);
    EXPECT_EQ(plain.exit_code, 2) << o << ": " << plain.err;
    EXPECT_EQ(plain.err.rfind("ftrun: error:", 0), 0u) << plain.err;
    EXPECT_TRUE(Has(plain.err, o)) << plain.err;
  }
  auto plain_help = Start({"--help"})->Wait(30s);
  EXPECT_FALSE(Has(plain_help.out, "--node-unit")) << plain_help.out;
}

}  // namespace
}  // namespace ftrun::testing
