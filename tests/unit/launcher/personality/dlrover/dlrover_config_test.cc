// dlrover-run's command line: parsing (torchrun's options plus DLRover's), the rewrite into
// the torchrun line ftrun runs, the settings left after it, and --numa-affinity's placement.
#include "launcher/personality/dlrover/dlrover_config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "launcher/cli/torchrun_args.h"
#include "launcher/personality/dlrover/numa_affinity.h"
#include "tests/support/test_support.h"

namespace ftrun::launcher {
namespace {

using Action = ParsedDlroverRun::Action;

ParsedDlroverRun Parse(std::vector<std::string> argv) {
  argv.push_back("train.py");
  return ParseDlroverRunArgs(argv);
}

DlroverArgs Args(std::vector<std::string> argv) {
  auto p = Parse(std::move(argv));
  EXPECT_EQ(p.action, Action::kRun) << p.error;
  return p.args;
}

// dlrover-run's line -> LaunchConfig, as RunTorchrun does it.
Result<LaunchConfig> Build(std::vector<std::string> argv, const EnvMap& env = {},
                           HostFacts host = {}, std::vector<std::string>* warnings = nullptr) {
  std::vector<std::string> w;
  auto a = DlroverToTorchrun(Args(std::move(argv)), env, host, warnings ? *warnings : w);
  if (!a) return a.error();
  auto c = BuildLaunchConfig(*a, env);
  if (!c) return c.error();
  if (auto s = ApplyDlroverSettings(*a, env, *c); !s) return s.error();
  return c;
}

TEST(DlroverArgs, DefaultsMatchDlroverRun) {
  DlroverArgs a = Args({});
  EXPECT_EQ(a.precheck, 0);
  EXPECT_FALSE(a.network_check);
  EXPECT_FALSE(a.comm_perf_test);
  EXPECT_EQ(a.node_unit, 1);
  EXPECT_FALSE(a.auto_config);
  EXPECT_FALSE(a.auto_tunning);
  EXPECT_FALSE(a.exclude_straggler);
  EXPECT_FALSE(a.save_at_breakpoint);
  EXPECT_EQ(a.accelerator, "nvidia.com/gpu");
  EXPECT_EQ(a.training_port, 60000);
  EXPECT_FALSE(a.numa_affinity);
  EXPECT_EQ(a.membind_policy, "preferred");
  EXPECT_EQ(a.ucp_device_type, "cpu");
  EXPECT_FALSE(a.switchbox_check);
  EXPECT_TRUE(a.box_pairs.empty());
  EXPECT_DOUBLE_EQ(a.min_bandwidth, 10000);
  EXPECT_EQ(a.min_channels, 2);
  EXPECT_EQ(a.role, "dlrover-trainer");  // what DLRover's flash checkpoint looks for
}

TEST(DlroverArgs, EveryOptionInBothSpellings) {
  for (const char* sep : {"-", "_"}) {
    auto name = [&](std::string n) {
      for (auto& c : n) {
        if (c == '-') c = sep[0];
      }
      return "--" + n;
    };
    DlroverArgs a = Args({name("precheck"),
                          "2",
                          name("network-check"),
                          name("comm-perf-test"),
                          name("node-unit"),
                          "2",
                          name("auto-config"),
                          name("auto-tunning"),
                          name("exclude-straggler"),
                          name("save-at-breakpoint"),
                          name("accelerator"),
                          "ascend-npu",
                          name("training-port"),
                          "61000",
                          name("numa-affinity"),
                          name("membind-policy"),
                          "bind",
                          name("ucp-device-type"),
                          "gpu",
                          name("switchbox-check"),
                          name("box-pairs"),
                          "0:1",
                          "2:3",
                          name("min-bandwidth"),
                          "5000",
                          name("min-channels"),
                          "1"});
    EXPECT_EQ(a.precheck, 2) << sep;
    EXPECT_TRUE(a.network_check && a.comm_perf_test && a.auto_config && a.auto_tunning);
    EXPECT_TRUE(a.exclude_straggler && a.save_at_breakpoint && a.numa_affinity);
    EXPECT_TRUE(a.switchbox_check);
    EXPECT_EQ(a.node_unit, 2);
    EXPECT_EQ(a.accelerator, "ascend-npu");
    EXPECT_EQ(a.training_port, 61000);
    EXPECT_EQ(a.membind_policy, "bind");
    EXPECT_EQ(a.ucp_device_type, "gpu");
    EXPECT_EQ(a.box_pairs, (std::vector<std::string>{"0:1", "2:3"}));
    EXPECT_DOUBLE_EQ(a.min_bandwidth, 5000);
    EXPECT_EQ(a.min_channels, 1);
  }
}

TEST(DlroverArgs, BadChoicesAreUsageErrors) {
  for (auto argv :
       std::vector<std::vector<std::string>>{{"--precheck", "3"}, {"--accelerator", "tpu"}}) {
    auto p = Parse(argv);
    EXPECT_EQ(p.action, Action::kUsageError) << argv[0];
    EXPECT_NE(p.error.find(argv[0]), std::string::npos) << p.error;
  }
}

TEST(DlroverArgs, TorchrunHasNoDlroverOptions) {
  auto p = ParseTorchrunArgs({"--node-unit", "2", "train.py"});
  EXPECT_EQ(p.action, Action::kUsageError);
  EXPECT_EQ(ParseTorchrunArgs({"--network-check", "train.py"}).action, Action::kRun);
}

TEST(DlroverArgs, OptionsAfterBoxPairsStillExpandPrefixes) {
  DlroverArgs a = Args({"--box-pairs", "0:1", "2:4", "--min-ch", "3"});
  EXPECT_EQ(a.box_pairs.size(), 2u);
  EXPECT_EQ(a.min_channels, 3);
}

TEST(DlroverConfig, PrecheckTurnsOnTheChecks) {
  std::vector<std::string> w;
  auto a = DlroverToTorchrun(Args({"--precheck", "1"}), {}, {}, w);
  ASSERT_TRUE(a);
  EXPECT_TRUE(a->network_check);
  EXPECT_FALSE(a->comm_perf_test);
  auto b = DlroverToTorchrun(Args({"--precheck", "2"}), {}, {}, w);
  ASSERT_TRUE(b);
  EXPECT_TRUE(b->network_check && b->comm_perf_test);
  auto alone = DlroverToTorchrun(Args({"--comm-perf-test"}), {}, {}, w);
  ASSERT_TRUE(alone);
  EXPECT_FALSE(alone->network_check || alone->comm_perf_test) << "DLRover's: not run alone";
}

// DLRover's log setup: its log directory variable, and a log directory alone sends every
// stream to the files and the console.
TEST(DlroverConfig, ALogDirectoryRedirectsAndTeesEveryStream) {
  std::vector<std::string> w;
  auto a = DlroverToTorchrun(Args({"--log-dir", "/l"}), {}, {}, w);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->redirects, "3");
  EXPECT_EQ(a->tee, "3");
  auto b = DlroverToTorchrun(Args({}), {{"DLROVER_LOG_AGENT_DIR", "/agent"}}, {}, w);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->log_dir, "/agent");
  EXPECT_EQ(b->tee, "3");
  auto c = DlroverToTorchrun(Args({"--log-dir", "/l", "--tee", "1"}), {}, {}, w);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->redirects, "0");
  EXPECT_EQ(c->tee, "1");
  auto d = DlroverToTorchrun(Args({}), {}, {}, w);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->tee, "0") << "no log directory: as torchrun";
}

TEST(DlroverConfig, AutoConfigReadsNodeNumAndTheGpus) {
  HostFacts gpus;
  gpus.gpu_count = 4;
  auto c = Build({"--auto-config"}, {{"NODE_NUM", "3"}, {"DLROVER_MASTER_ADDR", "m:1"}}, gpus);
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->min_nodes, 3);
  EXPECT_EQ(c->max_nodes, 3);
  EXPECT_EQ(c->nproc_per_node, 4);
  std::vector<std::string> w;
  auto a = DlroverToTorchrun(Args({"--auto-config"}), {{"NODE_NUM", "4"}}, gpus, w);
  ASSERT_TRUE(a);
  EXPECT_TRUE(a->network_check);  // 4 nodes and more
  auto small = DlroverToTorchrun(Args({"--auto-config"}), {{"NODE_NUM", "2"}}, gpus, w);
  ASSERT_TRUE(small);
  EXPECT_FALSE(small->network_check);

  // Without NODE_NUM --nnodes stays, as DLRover's (the network check from 4 nodes all the same).
  auto kept = DlroverToTorchrun(Args({"--auto-config", "--nnodes", "4"}), {}, gpus, w);
  ASSERT_TRUE(kept) << kept.error().message;
  EXPECT_EQ(kept->nnodes, "4");
  EXPECT_TRUE(kept->network_check);
  auto bad = Build({"--auto-config"}, {{"NODE_NUM", "many"}});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("NODE_NUM must be the number of nodes, got 'many'"),
            std::string::npos);

  std::vector<std::string> warnings;
  auto no_gpu =
      Build({"--auto-config", "--nproc-per-node", "2"}, {{"NODE_NUM", "1"}}, {}, &warnings);
  ASSERT_TRUE(no_gpu) << no_gpu.error().message;
  EXPECT_EQ(no_gpu->nproc_per_node, 2);
  ASSERT_FALSE(warnings.empty());
  EXPECT_NE(warnings.front().find("no GPU"), std::string::npos);
}

TEST(DlroverConfig, SeveralNodesUseTheMasterAddressAndTheJobName) {
  auto c = Build({"--nnodes", "2:4"},
                 {{"DLROVER_MASTER_ADDR", "master.svc:50001"}, {"ELASTIC_JOB_NAME", "job7"}});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->backend, RendezvousBackend::kDynamic);
  EXPECT_EQ(c->endpoint_host, "master.svc");
  EXPECT_EQ(c->endpoint_port, 50001);
  EXPECT_EQ(c->run_id, "job7");

  std::vector<std::string> warnings;
  auto fallback = Build({"--nnodes", "2", "--node-rank", "1"}, {}, {}, &warnings);
  ASSERT_TRUE(fallback) << fallback.error().message;
  EXPECT_EQ(fallback->backend, RendezvousBackend::kStatic);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("DLROVER_MASTER_ADDR"), std::string::npos);

  // An explicit --rdzv-endpoint wins.
  auto given = Build({"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "n0:29400"},
                     {{"DLROVER_MASTER_ADDR", "master.svc:50001"}});
  ASSERT_TRUE(given);
  EXPECT_EQ(given->endpoint_host, "n0");
}

TEST(DlroverConfig, NodeRankOrdersTheNodesAsDlroversMaster) {
  const EnvMap master = {{"DLROVER_MASTER_ADDR", "m:1"}};
  auto declared = [&](EnvMap env) {
    env.insert(master.begin(), master.end());
    auto c = Build({"--nnodes", "2"}, env);
    return c ? std::to_string(c->declared_node_rank) : c.error().message;
  };
  EXPECT_EQ(declared({}), "-1");
  EXPECT_EQ(declared({{"NODE_RANK", "3"}}), "3");
  EXPECT_EQ(declared({{"WORKER_RANK", "2"}}), "2");  // DLRover before 0.3
  EXPECT_EQ(declared({{"NODE_RANK", " 1 "}, {"WORKER_RANK", "2"}}), "1");
  EXPECT_EQ(declared({{"NODE_RANK", ""}, {"WORKER_RANK", "2"}}), "2");  // empty: unset
  EXPECT_EQ(declared({{"NODE_RANK", "x"}}),
            "NODE_RANK: must be this node's rank (a whole number from 0), got 'x'");
  EXPECT_EQ(declared({{"WORKER_RANK", "-1"}}),
            "WORKER_RANK: must be this node's rank (a whole number from 0), got '-1'");
}

TEST(DlroverConfig, NodeUnitMustDivideMaxAndRaisesMin) {
  auto c = Build({"--nnodes", "3:8", "--node-unit", "2"}, {{"DLROVER_MASTER_ADDR", "m:1"}});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->node_unit, 2);
  EXPECT_EQ(c->min_nodes, 4);  // 3 rounded up to a whole unit
  auto bad = Build({"--nnodes", "4", "--node-unit", "3"});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("--node-unit 3"), std::string::npos);
  EXPECT_FALSE(Build({"--node-unit", "0"}));
}

TEST(DlroverConfig, WarnsForWhatNeedsDlroversMaster) {
  std::vector<std::string> w;
  auto c = Build({"--auto-tunning", "--save-at-breakpoint"},
                 {{"DLROVER_TRAINING_ELASTIC_MODE", "ucp"}}, {}, &w);
  ASSERT_TRUE(c);
  ASSERT_EQ(w.size(), 2u);
  std::string all;
  for (const auto& line : w) all += line + "\n";
  EXPECT_NE(all.find("--auto-tunning"), std::string::npos);
  EXPECT_NE(all.find("--ucp-device-type"), std::string::npos);
  EXPECT_EQ(all.find("--save-at-breakpoint"), std::string::npos) << "ftrun does it: " << all;
}

TEST(DlroverConfig, SaveAtBreakpointSavesAtTheFaultAndPersistsTheMemorySnapshots) {
  auto c = Build({"--save-at-breakpoint", "--fault-save", "off"});
  ASSERT_TRUE(c);
  EXPECT_TRUE(c->fault_save);
  EXPECT_TRUE(c->flash_persist_at_breakpoint);
  auto plain = Build({});
  ASSERT_TRUE(plain);
  EXPECT_FALSE(plain->flash_persist_at_breakpoint);
}

TEST(DlroverConfig, AscendGetsTheTrainingPortUnlessHcclSaysOtherwise) {
  auto c = Build({"--accelerator", "ascend-npu", "--training-port", "61000"});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->extra_env.at("HCCL_IF_BASE_PORT"), "61000");
  auto kept = Build({"--accelerator", "ascend-npu"}, {{"HCCL_IF_BASE_PORT", "62000"}});
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->extra_env.count("HCCL_IF_BASE_PORT"), 0u);
  auto gpu = Build({});
  ASSERT_TRUE(gpu);
  EXPECT_TRUE(gpu->extra_env.empty());
}

// A fake /proc/driver/nvidia/gpus and /sys with two NUMA nodes.
class NumaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    namespace fs = std::filesystem;
    root_ = dir_.path();
    const std::vector<std::pair<std::string, int>> gpus = {
        {"0000:3b:00.0", 0}, {"0000:5e:00.0", 0}, {"0000:86:00.0", 1}, {"0000:af:00.0", 1}};
    for (const auto& [bus, node] : gpus) {
      fs::create_directories(root_ + "/nvidia/" + bus);
      fs::create_directories(root_ + "/sys/bus/pci/devices/" + bus);
      std::ofstream(root_ + "/sys/bus/pci/devices/" + bus + "/numa_node") << node << "\n";
    }
    for (int n : {0, 1}) {
      fs::create_directories(root_ + "/sys/devices/system/node/node" + std::to_string(n));
      std::ofstream(root_ + "/sys/devices/system/node/node" + std::to_string(n) + "/cpulist")
          << (n == 0 ? "0-15,32-47" : "16-31,48-63") << "\n";
    }
  }
  ftrun::testing::TempDir dir_;
  std::string root_;
};

TEST_F(NumaTest, EachRankGetsItsGpusNode) {
  auto p = GpuNumaPlacements(4, {}, root_ + "/nvidia", root_ + "/sys");
  ASSERT_TRUE(p) << p.error().message;
  ASSERT_EQ(p->size(), 4u);
  EXPECT_EQ((*p)[0].node, 0);
  EXPECT_EQ((*p)[1].node, 0);
  EXPECT_EQ((*p)[2].node, 1);
  EXPECT_EQ((*p)[2].cpus, "16-31,48-63");
  EXPECT_EQ(NumaCommandPrefix((*p)[2], "bind", "/usr/bin/numactl"),
            (std::vector<std::string>{"/usr/bin/numactl", "--cpunodebind=1", "--membind=1"}));
  EXPECT_EQ(NumaCommandPrefix((*p)[0], "preferred", "/usr/bin/numactl"),
            (std::vector<std::string>{"/usr/bin/numactl", "--cpunodebind=0", "--preferred=0"}));
  // Any other policy, as DLRover's script: the CPUs only.
  EXPECT_EQ(NumaCommandPrefix((*p)[0], "none", "/usr/bin/numactl"),
            (std::vector<std::string>{"/usr/bin/numactl", "--cpunodebind=0"}));
  EXPECT_EQ(NumaCommandPrefix((*p)[0], "bind", ""),
            (std::vector<std::string>{"taskset", "-c", "0-15,32-47"}));
}

TEST_F(NumaTest, CudaVisibleDevicesChoosesTheGpus) {
  auto p =
      GpuNumaPlacements(2, {{"CUDA_VISIBLE_DEVICES", "3,0"}}, root_ + "/nvidia", root_ + "/sys");
  ASSERT_TRUE(p) << p.error().message;
  EXPECT_EQ((*p)[0].node, 1);
  EXPECT_EQ((*p)[1].node, 0);
}

TEST_F(NumaTest, ClearErrors) {
  auto none = GpuNumaPlacements(1, {}, root_ + "/missing", root_ + "/sys");
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().message.find("no NVIDIA GPU"), std::string::npos);
  auto few = GpuNumaPlacements(8, {}, root_ + "/nvidia", root_ + "/sys");
  ASSERT_FALSE(few);
  EXPECT_NE(few.error().message.find("8 local ranks but only 4"), std::string::npos);
  std::ofstream(root_ + "/sys/bus/pci/devices/0000:3b:00.0/numa_node") << "-1\n";
  auto unknown = GpuNumaPlacements(1, {}, root_ + "/nvidia", root_ + "/sys");
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message.find("0000:3b:00.0"), std::string::npos);
}

}  // namespace
}  // namespace ftrun::launcher
