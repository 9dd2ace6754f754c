// dlrover-run through the real binary: every DLRover option in both spellings and as PET_<NAME>.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "tests/integration/dlrover_run_fixture.h"

namespace ftrun::testing {
namespace {

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
    auto ok = DryRun(
        [&] {
          auto o = s.options;
          o.insert(o.end(), {"--nnodes", "1:4", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                             "127.0.0.1:" + port_});
          return o;
        }(),
        s.env);
    EXPECT_EQ(ok.exit_code, 0) << s.name << ": " << ok.err;
    EXPECT_TRUE(Has(ok.out, "nodes:          2:4")) << s.name << ": MIN is raised to one unit\n"
                                                    << ok.out;
    auto o = s.options;
    o.insert(o.end(), {"--nnodes", "3"});
    auto bad = Run(Cmd(o), s.env);
    EXPECT_EQ(bad.exit_code, 2) << s.name << ": " << bad.err;
    // From the environment, the variable is named.
    const std::string culprit =
        s.env.empty() ? "--node-unit 2" : "PET_NODE_UNIT=2 (read for --node-unit)";
    EXPECT_TRUE(Has(bad.err, "dlrover-run: error: " + culprit + ": --nnodes MAX 3")) << bad.err;
  }
}

TEST_F(DlroverRun, AutoConfigReadsNodeNumInEverySpelling) {
  for (const auto& s : Spellings("auto-config")) {
    auto env = s.env;
    env["NODE_NUM"] = "0";
    auto bad = Run(Cmd(s.options), env);
    EXPECT_EQ(bad.exit_code, 2) << s.name << ": " << bad.err;
    EXPECT_TRUE(Has(bad.err, "dlrover-run: error: --auto-config: NODE_NUM")) << bad.err;
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

TEST_F(DlroverRun, SaveAtBreakpointTurnsTheFaultSaveAndTheBreakpointWritesOnInEverySpelling) {
  for (const auto& s : Spellings("save-at-breakpoint")) {
    auto o = s.options;
    o.insert(o.end(), {"--fault-save", "off"});
    auto r = DryRun(o, s.env);
    EXPECT_EQ(r.exit_code, 0) << s.name << ": " << r.err;
    EXPECT_TRUE(Has(r.out, "fault save:     on")) << s.name << ": " << r.out;
    EXPECT_TRUE(Has(r.out, "at breakpoints: the newest memory snapshots are written to storage"))
        << s.name << ": " << r.out;
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

// Any value, as DLRover's (neither bind nor preferred pins the CPUs only).
TEST_F(DlroverRun, MembindPolicyTakesAnyValueInEverySpelling) {
  for (const char* policy : {"bind", "none"}) {
    for (const auto& s : Spellings("membind-policy", policy)) {
      auto o = s.options;
      o.push_back("--numa-affinity");
      auto r = Run(Cmd(o), s.env);
      EXPECT_EQ(r.exit_code, 0) << s.name << ": " << r.err;
    }
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
  // Within the network check only, as DLRover's.
  for (const auto& s : Spellings("comm-perf-test")) {
    auto o = s.options;
    o.push_back("--network-check");
    auto r = DryRun(o, s.env);
    EXPECT_EQ(r.exit_code, 0) << s.name << ": " << r.err;
    EXPECT_TRUE(Has(r.out, "comm_check.py")) << s.name << ": " << r.out;
    auto alone = DryRun(s.options, s.env);
    EXPECT_EQ(alone.exit_code, 0) << s.name << ": " << alone.err;
    EXPECT_FALSE(Has(alone.out, "comm_check.py")) << s.name << ": " << alone.out;
    EXPECT_EQ(Occurrences(alone.err, "--comm-perf-test: runs with the network check only"), 1)
        << s.name << ": " << alone.err;
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

}  // namespace
}  // namespace ftrun::testing
