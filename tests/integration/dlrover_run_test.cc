// The dlrover-run personality through the real binary (`ftrun dlrover-run ...`, or ftrun run
// through a symlink named dlrover-run): every DLRover option in both spellings and as
// PET_<NAME>, the workers' environment, each warning exactly once, --node-unit and
// --auto-config with several agents on loopback, dlrover's --precheck reaching the network
// check, usage errors (exit 2, one line).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <fstream>

#include "launcher/environment.h"
#include "launcher/host.h"
#include "launcher/launch_config.h"
#include "tests/support/test_support.h"

namespace ftrun::testing {
namespace {

using namespace std::chrono_literals;

int Occurrences(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++n;
  }
  return n;
}

bool Has(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

// This host has an NVIDIA GPU (then --numa-affinity and --auto-config behave differently).
bool HostHasGpu() {
  return launcher::DetectHostFacts(launcher::CurrentEnvironment()).gpu_count > 0;
}

class DlroverRun : public ::testing::Test {
 protected:
  void SetUp() override { port_ = std::to_string(launcher::PickFreePort().value()); }

  // The variables dlrover-run reads, and every PET_*: the test's own environment must not
  // leak into the runs.
  static std::vector<std::string> Unset() {
    std::vector<std::string> out = {"DLROVER_MASTER_ADDR", "ELASTIC_JOB_NAME", "NODE_NUM",
                                    "HCCL_IF_BASE_PORT", "DLROVER_TRAINING_ELASTIC_MODE",
                                    "LOGLEVEL", "CUDA_VISIBLE_DEVICES", "FTRUN_EVENT_LOG"};
    for (const auto& [k, v] : launcher::CurrentEnvironment()) {
      if (k.rfind("PET_", 0) == 0) out.push_back(k);
    }
    return out;
  }
  // ftrun dlrover-run --log-dir <tmp> <options> --no-python fake_worker <actions>
  std::vector<std::string> Cmd(const std::vector<std::string>& options,
                               const std::vector<std::string>& actions = {"exit", "0"}) {
    std::vector<std::string> argv = {"dlrover-run", "--log-dir", dir_ / "logs"};
    argv.insert(argv.end(), options.begin(), options.end());
    argv.push_back("--no-python");
    argv.push_back(FakeWorkerBinary());
    argv.insert(argv.end(), actions.begin(), actions.end());
    return argv;
  }
  std::unique_ptr<ChildRun> Start(const std::vector<std::string>& argv,
                                  const std::map<std::string, std::string>& env = {},
                                  const std::string& program = FtrunBinary()) {
    return std::make_unique<ChildRun>(program, argv, env, Unset());
  }
  RunResult Run(const std::vector<std::string>& argv,
                const std::map<std::string, std::string>& env = {},
                std::chrono::milliseconds timeout = 30s) {
    return Start(argv, env)->Wait(timeout);
  }
  // A dry run: the summary of what would run, on stdout.
  RunResult DryRun(std::vector<std::string> options,
                   const std::map<std::string, std::string>& env = {}) {
    options.insert(options.begin(), "--dry-run");
    return Run(Cmd(options), env);
  }
  // The environment worker `rank` wrote with fake_worker's `env` action.
  std::map<std::string, std::string> WorkerEnv(const std::string& tag, int rank = 0) {
    return ParseEnvFile(dir_ / (tag + "." + std::to_string(rank)));
  }
  // The option as --a-b VALUE, as --a_b VALUE, and as PET_A_B=VALUE: {options, env} each.
  struct Spelling {
    std::string name;
    std::vector<std::string> options;
    std::map<std::string, std::string> env;
  };
  static std::vector<Spelling> Spellings(const std::string& dashed,
                                         const std::string& value = "") {
    std::string underscored = dashed, pet = "PET_";
    for (char& c : underscored) c = c == '-' ? '_' : c;
    for (char c : dashed) pet += c == '-' ? '_' : static_cast<char>(std::toupper(c));
    auto opt = [&](const std::string& flag) {
      std::vector<std::string> o = {flag};
      if (!value.empty()) o.push_back(value);
      return o;
    };
    std::vector<Spelling> out = {{"--" + dashed, opt("--" + dashed), {}}};
    if (underscored != dashed) out.push_back({"--" + underscored, opt("--" + underscored), {}});
    out.push_back({pet, {}, {{pet, value.empty() ? "1" : value}}});
    return out;
  }
  std::vector<std::string> Records() { return Lines(ReadFile(dir_ / "records")); }
  int Count(const std::string& needle) {
    int n = 0;
    for (const auto& l : Records()) n += Has(l, needle);
    return n;
  }

  static constexpr const char* kFastConf =
      "last_call_timeout=0.5,keep_alive_interval=0.5,keep_alive_max_attempt=4";
  TempDir dir_;
  std::string port_;
};

// ---- every option, in both spellings and as PET_<NAME> ----

TEST_F(DlroverRun, PrecheckTurnsOnTheNetworkCheckAndTheCommPerfTest) {
  for (const auto& s : Spellings("precheck", "1")) {
    auto opts = s.options;
    opts.insert(opts.end(), {"--nproc-per-node", "1"});
    auto r = Run(Cmd(opts), s.env);
    EXPECT_EQ(r.exit_code, 0) << s.name << ": " << r.err;
    EXPECT_EQ(Occurrences(r.err, "network check: a single-node job has no pair to test"), 1)
        << s.name << " did not reach the network check: " << r.err;
  }
  for (const auto& s : Spellings("precheck", "2")) {
    auto r = DryRun(s.options, s.env);
    EXPECT_EQ(r.exit_code, 0) << s.name << ": " << r.err;
    EXPECT_TRUE(Has(r.out, "network check:  on")) << s.name << ": " << r.out;
    EXPECT_TRUE(Has(r.out, "comm_check.py")) << s.name << ": " << r.out;
  }
  auto off = DryRun({"--precheck", "0"});
  EXPECT_EQ(off.exit_code, 0) << off.err;
  EXPECT_TRUE(Has(off.out, "network check:  off")) << off.out;
}

TEST_F(DlroverRun, NodeUnitMustDivideMaxInEverySpelling) {
  for (const auto& s : Spellings("node-unit", "2")) {
    auto ok = DryRun([&] {
      auto o = s.options;
      o.insert(o.end(), {"--nnodes", "1:4", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                         "127.0.0.1:" + port_});
      return o;
    }(), s.env);
    EXPECT_EQ(ok.exit_code, 0) << s.name << ": " << ok.err;
    EXPECT_TRUE(Has(ok.out, "nodes:          2:4")) << s.name << ": MIN is raised to one unit\n"
                                                    << ok.out;
    auto o = s.options;
    o.insert(o.end(), {"--nnodes", "3"});
    auto bad = Run(Cmd(o), s.env);
    EXPECT_EQ(bad.exit_code, 2) << s.name << ": " << bad.err;
    EXPECT_TRUE(Has(bad.err, "dlrover-run: error: --node-unit 2: --nnodes MAX 3")) << bad.err;
  }
}

TEST_F(DlroverRun, AutoConfigReadsNodeNumInEverySpelling) {
  for (const auto& s : Spellings("auto-config")) {
    auto missing = Run(Cmd(s.options), s.env);
    EXPECT_EQ(missing.exit_code, 2) << s.name << ": " << missing.err;
    EXPECT_TRUE(Has(missing.err, "dlrover-run: error: --auto-config: NODE_NUM")) << missing.err;
    auto env = s.env;
    env["NODE_NUM"] = "1";
    auto r = Run(Cmd(s.options, {"env", dir_ / ("env" + s.name)}), env);
    EXPECT_EQ(r.exit_code, 0) << s.name << ": " << r.err;
    EXPECT_EQ(WorkerEnv("env" + s.name)["GROUP_WORLD_SIZE"], "1") << s.name;
    if (!HostHasGpu()) {
      EXPECT_EQ(Occurrences(r.err, "--auto-config: no GPU found"), 1) << s.name << ": " << r.err;
    }
  }
  // From 4 nodes on, the network check is on, as in dlrover-run.
  for (const auto& [nodes, check] :
       std::vector<std::pair<std::string, std::string>>{{"3", "off"}, {"4", "on"}}) {
    auto r = DryRun({"--auto-config"},
                    {{"NODE_NUM", nodes}, {"DLROVER_MASTER_ADDR", "127.0.0.1:" + port_}});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(Has(r.out, "nodes:          " + nodes + ":" + nodes)) << r.out;
    EXPECT_TRUE(Has(r.out, "network check:  " + check)) << nodes << " nodes: " << r.out;
  }
}

TEST_F(DlroverRun, AutoTunningWarnsInEverySpelling) {
  for (const auto& s : Spellings("auto-tunning")) {
    auto r = Run(Cmd(s.options), s.env);
    EXPECT_EQ(r.exit_code, 0) << s.name << ": " << r.err;
    EXPECT_EQ(Occurrences(r.err, "--auto-tunning needs DLRover's job master"), 1)
        << s.name << ": " << r.err;
  }
}

TEST_F(DlroverRun, SaveAtBreakpointTurnsTheFaultSaveOnInEverySpelling) {
  for (const auto& s : Spellings("save-at-breakpoint")) {
    auto o = s.options;
    o.insert(o.end(), {"--fault-save", "off"});
    auto r = DryRun(o, s.env);
    EXPECT_EQ(r.exit_code, 0) << s.name << ": " << r.err;
    EXPECT_TRUE(Has(r.out, "fault save:     on")) << s.name << ": " << r.out;
    EXPECT_EQ(Occurrences(r.err, "--save-at-breakpoint: ftrun's fault-time save"), 1)
        << s.name << ": " << r.err;
  }
}

TEST_F(DlroverRun, AcceleratorAndTrainingPortGiveAscendWorkersTheirHcclPort) {
  // --accelerator has one spelling: --accelerator and PET_ACCELERATOR.
  for (const auto& s : Spellings("accelerator", "ascend-npu")) {
    auto r = Run(Cmd(s.options, {"env", dir_ / ("acc" + s.name)}), s.env);
    ASSERT_EQ(r.exit_code, 0) << s.name << ": " << r.err;
    EXPECT_EQ(WorkerEnv("acc" + s.name)["HCCL_IF_BASE_PORT"], "60000") << s.name;
  }
  for (const auto& s : Spellings("training-port", "61234")) {
    auto o = s.options;
    o.insert(o.end(), {"--accelerator", "ascend-npu", "--nproc-per-node", "2"});
    auto r = Run(Cmd(o, {"env", dir_ / ("port" + s.name)}), s.env);
    ASSERT_EQ(r.exit_code, 0) << s.name << ": " << r.err;
    EXPECT_EQ(WorkerEnv("port" + s.name, 0)["HCCL_IF_BASE_PORT"], "61234") << s.name;
    EXPECT_EQ(WorkerEnv("port" + s.name, 1)["HCCL_IF_BASE_PORT"], "61234") << s.name;
  }
}

TEST_F(DlroverRun, NumaAffinityWithoutAGpuWarnsInEverySpelling) {
  if (HostHasGpu()) GTEST_SKIP() << "this host has an NVIDIA GPU: ranks would be pinned";
  for (const auto& s : Spellings("numa-affinity")) {
    auto r = Run(Cmd(s.options, {"env", dir_ / ("env" + s.name)}), s.env);
    EXPECT_EQ(r.exit_code, 0) << s.name << ": " << r.err;
    EXPECT_EQ(Occurrences(r.err, "--numa-affinity: no NVIDIA GPU"), 1) << s.name << ": " << r.err;
    EXPECT_EQ(WorkerEnv("env" + s.name)["RANK"], "0") << s.name << ": the worker ran unpinned";
  }
}

TEST_F(DlroverRun, MembindPolicyIsCheckedInEverySpelling) {
  for (const auto& s : Spellings("membind-policy", "bind")) {
    auto o = s.options;
    o.push_back("--numa-affinity");
    auto r = Run(Cmd(o), s.env);
    EXPECT_EQ(r.exit_code, 0) << s.name << ": " << r.err;
  }
  for (const auto& s : Spellings("membind-policy", "nowhere")) {
    auto r = Run(Cmd(s.options), s.env);
    EXPECT_EQ(r.exit_code, 2) << s.name << ": " << r.err;
    EXPECT_TRUE(Has(r.err, "--membind-policy")) << s.name << ": " << r.err;
  }
}

TEST_F(DlroverRun, UcpDeviceTypeWarnsInUcpModeInEverySpelling) {
  for (const auto& s : Spellings("ucp-device-type", "npu")) {
    auto env = s.env;
    env["DLROVER_TRAINING_ELASTIC_MODE"] = "ucp";
    auto r = Run(Cmd(s.options), env);
    EXPECT_EQ(r.exit_code, 0) << s.name << ": " << r.err;
    EXPECT_EQ(Occurrences(r.err, "--ucp-device-type npu: ftrun does not convert"), 1)
        << s.name << ": " << r.err;
    // Outside ucp mode the option is silent.
    auto quiet = Run(Cmd(s.options), s.env);
    EXPECT_EQ(quiet.exit_code, 0) << quiet.err;
    EXPECT_FALSE(Has(quiet.err, "--ucp-device-type")) << quiet.err;
  }
}

// dlrover-run's pre-flight options that ftrun shares.
TEST_F(DlroverRun, SharedPreflightOptionsInEverySpelling) {
  for (const auto& s : Spellings("network-check")) {
    auto r = DryRun(s.options, s.env);
    EXPECT_EQ(r.exit_code, 0) << s.name << ": " << r.err;
    EXPECT_TRUE(Has(r.out, "network check:  on")) << s.name << ": " << r.out;
  }
  for (const auto& s : Spellings("comm-perf-test")) {
    auto r = DryRun(s.options, s.env);
    EXPECT_EQ(r.exit_code, 0) << s.name << ": " << r.err;
    EXPECT_TRUE(Has(r.out, "comm_check.py")) << s.name << ": " << r.out;
  }
  for (const auto& s : Spellings("exclude-straggler")) {
    auto o = s.options;
    o.push_back("--network-check");
    auto r = DryRun(o, s.env);
    EXPECT_EQ(r.exit_code, 0) << s.name << ": " << r.err;
    EXPECT_TRUE(Has(r.out, "stragglers below 0.5 x median excluded")) << s.name << ": " << r.out;
  }
  for (const auto& s : Spellings("switchbox-check")) {
    auto r = DryRun(s.options, s.env);
    EXPECT_EQ(r.exit_code, 0) << s.name << ": " << r.err;
    EXPECT_TRUE(Has(r.out, "switchbox:      pairs 0:1 2:4 3:5 6:7, at least 2 at 10000 MB/s"))
        << s.name << ": " << r.out;
  }
  for (const auto& [opt, value, shown] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"box-pairs", "0:1 2:3", "pairs 0:1 2:3,"},
           {"min-bandwidth", "500", "at 500 MB/s"},
           {"min-channels", "1", "at least 1 at"}}) {
    for (const auto& s : Spellings(opt, value)) {
      auto o = s.options;
      if (opt == "box-pairs" && !o.empty()) o = {o.front(), "0:1", "2:3"};  // one word a pair
      o.push_back("--switchbox-check");
      auto r = DryRun(o, s.env);
      EXPECT_EQ(r.exit_code, 0) << s.name << ": " << r.err;
      EXPECT_TRUE(Has(r.out, shown)) << s.name << ": " << r.out;
    }
  }
}

// ---- the workers' environment ----

TEST_F(DlroverRun, WorkersRunAsDlroverTrainerWithTheElasticJobNameAsRunId) {
  auto r = Run(Cmd({"--nproc-per-node", "2", "--tee", "3"},
                   {"env", dir_ / "env", "print", "hello"}),
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

  // --rdzv-id and --role given on the command line win.
  auto own = Run(Cmd({"--rdzv-id", "mine", "--role", "actor"}, {"env", dir_ / "own"}),
                 {{"ELASTIC_JOB_NAME", "llama-pretrain"}});
  ASSERT_EQ(own.exit_code, 0) << own.err;
  EXPECT_EQ(WorkerEnv("own")["TORCHELASTIC_RUN_ID"], "mine");
  EXPECT_EQ(WorkerEnv("own")["ROLE_NAME"], "actor");
}

TEST_F(DlroverRun, AscendTrainingPortMustBeAPort) {
  auto r = Run(Cmd({"--accelerator", "ascend-npu", "--training-port", "70000"}));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(Lines(r.err).size(), 1u) << r.err;
  EXPECT_TRUE(Has(r.err, "dlrover-run: error: --training-port: 70000")) << r.err;
}

TEST_F(DlroverRun, AscendHcclPortAlreadySetIsKept) {
  auto r = Run(Cmd({"--accelerator", "ascend-npu", "--training-port", "61234"},
                   {"env", dir_ / "env"}),
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
                        "--save-at-breakpoint: ftrun's fault-time save",
                        "--ucp-device-type gpu: ftrun does not convert"}) {
    EXPECT_EQ(Occurrences(r.err, w), 1) << w << "\n" << r.err;
  }
  if (!gpu) {
    EXPECT_EQ(Occurrences(r.err, "--numa-affinity: no NVIDIA GPU"), 1) << r.err;
  }
  // Every warning is one [warning] line: none repeats under another wording.
  int warnings = Occurrences(r.err, "[warning]");
  int omp = Occurrences(r.err, "OMP_NUM_THREADS");  // torchrun's banner with 2 ranks
  EXPECT_EQ(warnings, 3 + (gpu ? 0 : 1) + omp) << r.err;
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
    EXPECT_EQ(Occurrences(r.err, "DLROVER_MASTER_ADDR is not set; using torchrun's static "
                                 "rendezvous at --master-addr 127.0.0.1:" + port_),
              1)
        << r.err;
    EXPECT_TRUE(Has(r.err, "rdzv_backend=static")) << r.err;
  }
  EXPECT_EQ(Count("world=2"), 2) << ReadFile(dir_ / "records");
  EXPECT_EQ(Count("group=1 world=2"), 1);
}

// ---- several agents on loopback ----

TEST_F(DlroverRun, NodeUnitTwoFormsARoundOfTwoAndTheThirdWaits) {
  const std::map<std::string, std::string> env = {
      {"DLROVER_MASTER_ADDR", "127.0.0.1:" + port_}, {"ELASTIC_JOB_NAME", "unit"}};
  auto opts = Cmd({"--nnodes", "1:4", "--node-unit", "2", "--nproc-per-node", "2",
                   "--rdzv-conf", kFastConf},
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
  const std::map<std::string, std::string> env = {
      {"DLROVER_MASTER_ADDR", "127.0.0.1:" + port_}, {"NODE_NUM", "2"}};
  auto opts = Cmd({"--auto-config", "--nproc-per-node", "1", "--rdzv-conf", kFastConf},
                  {"record", dir_ / "records"});
  auto a = Start(opts, env);
  ASSERT_TRUE(WaitFor([&] { return Has(a->Err(), "joined the job"); }, 20s)) << a->Err();
  auto b = Start(opts, env);
  auto ra = a->Wait(30s), rb = b->Wait(30s);
  for (const auto* r : {&ra, &rb}) {
    EXPECT_EQ(r->exit_code, 0) << r->err;
    EXPECT_TRUE(Has(r->err, "starting nnodes=2:2")) << r->err;
    EXPECT_TRUE(Has(r->err, "group_world_size=2")) << r->err;
  }
  if (!HostHasGpu()) {
    EXPECT_EQ(Records().size(), 2u) << ReadFile(dir_ / "records");
  }
  EXPECT_EQ(Count("group=0 "), Count("group=1 ")) << ReadFile(dir_ / "records");

  auto missing = Run(Cmd({"--auto-config"}), {{"DLROVER_MASTER_ADDR", "127.0.0.1:" + port_}});
  EXPECT_EQ(missing.exit_code, 2) << missing.err;
  EXPECT_EQ(Lines(missing.err).size(), 1u) << missing.err;
  EXPECT_TRUE(Has(missing.err, "NODE_NUM")) << missing.err;
}

TEST_F(DlroverRun, PrecheckOneRunsTheNetworkCheckBeforeTheWorkers) {
  const std::map<std::string, std::string> env = {
      {"DLROVER_MASTER_ADDR", "127.0.0.1:" + port_}};
  auto opts = Cmd({"--nnodes", "2", "--precheck", "1", "--nproc-per-node", "1",
                   "--network-check-bytes", "1MiB", "--rdzv-conf", kFastConf},
                  {"record", dir_ / "records"});
  auto a = Start(opts, env);
  ASSERT_TRUE(WaitFor([&] { return Has(a->Err(), "joined the job"); }, 20s)) << a->Err();
  auto b = Start(opts, env);
  auto ra = a->Wait(30s), rb = b->Wait(30s);
  for (const auto* r : {&ra, &rb}) {
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
           {"--precheck", "3"}, {"--accelerator", "tpu"}, {"--membind-policy", "x"}}) {
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
