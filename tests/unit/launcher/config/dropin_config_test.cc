// What real start scripts meet in the configuration: device counts for --nproc-per-node
// xpu/npu (through a fake /dev and sysfs tree), --virtual-local-rank against
// CUDA_VISIBLE_DEVICES, endpoints written as URLs, c10d without an endpoint, and
// --standalone next to PET_RDZV_* variables.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "launcher/cli/torchrun_args.h"
#include "launcher/config/launch_config.h"
#include "tests/support/test_support.h"

namespace ftrun::launcher {
namespace {

namespace fs = std::filesystem;

Result<LaunchConfig> Build(std::vector<std::string> argv, EnvMap env = {}) {
  argv.push_back("train.py");
  auto p = ParseTorchrunArgs(argv);
  EXPECT_EQ(p.action, ParsedCommandLine::Action::kRun) << p.error;
  return BuildLaunchConfig(p.args, env);
}

std::string ErrorOf(std::vector<std::string> argv, EnvMap env = {}) {
  auto c = Build(std::move(argv), std::move(env));
  return c ? std::string("(no error)") : c.error().message;
}

// A fake device tree: two Intel GPUs (i915, xe), an AMD card, a connector and a render node
// that must not count; four Ascend NPUs and the NPU driver's other nodes.
class FakeDevices : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = dir_.path();  // its own directory: ctest runs these tests side by side
    Card("card0", "0x8086", "i915");
    Card("card1", "0x8086", "xe");
    Card("card2", "0x1002", "amdgpu");
    Card("card0-DP-1", "0x8086", "i915");
    Card("renderD128", "0x8086", "i915");
    fs::create_directories(root_ / "dev");
    for (const char* n : {"davinci0", "davinci1", "davinci2", "davinci3", "davinci_manager",
                          "devmm_svm", "hisi_hdc"}) {
      std::ofstream(root_ / "dev" / n) << "";
    }
    paths_.nvidia_proc_dir = (root_ / "no_nvidia").string();
    paths_.drm_dir = (root_ / "drm").string();
    paths_.dev_dir = (root_ / "dev").string();
  }
  void Card(const std::string& name, const std::string& vendor, const std::string& driver) {
    const fs::path device = root_ / "drm" / name / "device";
    fs::create_directories(device);
    std::ofstream(device / "vendor") << vendor << "\n";
    fs::create_directories(root_ / "drivers" / driver);
    fs::create_directory_symlink(root_ / "drivers" / driver, device / "driver");
  }

  Result<int> Resolve(const std::string& spec, const EnvMap& env = {}) {
    auto c = Build({"--nproc-per-node", spec}, env);
    if (!c) return c.error();
    if (auto s = ResolveNprocPerNode(*c, DetectHostFacts(env, paths_)); !s) return s.error();
    return c->nproc_per_node;
  }

  testing::TempDir dir_;
  fs::path root_;
  DevicePaths paths_;
};

TEST_F(FakeDevices, XpuCountsIntelCardsOnly) {
  EXPECT_EQ(DetectHostFacts({}, paths_).xpu_count, 2);
  EXPECT_EQ(*Resolve("xpu"), 2);
  EXPECT_EQ(*Resolve("xpu", {{"ZE_AFFINITY_MASK", "1"}}), 1);
}

TEST_F(FakeDevices, NpuCountsDavinciNodes) {
  EXPECT_EQ(DetectHostFacts({}, paths_).npu_count, 4);
  EXPECT_EQ(*Resolve("npu"), 4);
  EXPECT_EQ(*Resolve("npu", {{"ASCEND_RT_VISIBLE_DEVICES", "2,3"}}), 2);
}

TEST_F(FakeDevices, MissingDevicesAndUnknownTypesAreClearErrors) {
  auto gpu = Resolve("gpu");
  ASSERT_FALSE(gpu);
  EXPECT_NE(gpu.error().message.find("no NVIDIA GPU"), std::string::npos);
  auto hidden = Resolve("npu", {{"ASCEND_RT_VISIBLE_DEVICES", ""}});
  ASSERT_FALSE(hidden);
  EXPECT_NE(hidden.error().message.find("no Ascend NPU"), std::string::npos)
      << hidden.error().message;
  paths_.drm_dir = (root_ / "none").string();
  auto xpu = Resolve("xpu");
  ASSERT_FALSE(xpu);
  EXPECT_NE(xpu.error().message.find("--nproc-per-node xpu: no Intel GPU"), std::string::npos);
  auto mlu = Resolve("mlu");
  ASSERT_FALSE(mlu);
  EXPECT_NE(mlu.error().message.find("cannot count 'mlu' devices"), std::string::npos)
      << mlu.error().message;
}

TEST(DropinConfig, VirtualLocalRankNeedsADevicePerWorker) {
  const std::vector<std::string> two = {"--nproc-per-node", "2", "--virtual-local-rank"};
  const std::string e = ErrorOf(two, {{"CUDA_VISIBLE_DEVICES", "4"}});
  EXPECT_NE(e.find("--virtual-local-rank: 2 workers but CUDA_VISIBLE_DEVICES='4' lists 1 device"),
            std::string::npos)
      << e;
  EXPECT_TRUE(Build(two, {{"CUDA_VISIBLE_DEVICES", "4,5"}}));
  EXPECT_TRUE(Build(two));  // no mask: devices 0 and 1
  EXPECT_TRUE(Build({"--nproc-per-node", "2"}, {{"CUDA_VISIBLE_DEVICES", "4"}}));
  // After --nproc-per-node cpu is resolved (the check torchrun_main makes then).
  auto c = *Build({"--nproc-per-node", "cpu", "--virtual-local-rank"});
  c.nproc_per_node = 3;
  EXPECT_FALSE(CheckVirtualLocalRankDevices(c, {{"CUDA_VISIBLE_DEVICES", "0,1"}}));
}

TEST(DropinConfig, EndpointWrittenAsAUrlIsAUsageError) {
  const std::string e = ErrorOf(
      {"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "http://127.0.0.1:29400"});
  EXPECT_EQ(e,
            "--rdzv-endpoint: 'http://127.0.0.1:29400' is a URL; give host:port (127.0.0.1:29400)");
  EXPECT_NE(ErrorOf({"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "a b:1"})
                .find("the host must be"),
            std::string::npos);
  EXPECT_TRUE(
      Build({"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "node-0.svc:1"}));
}

// torch 1.13's static backend takes its master from --rdzv-endpoint when one is given (the
// workers' MASTER_ADDR): other nodes' workers got the --master-addr default, their own host.
TEST(DropinConfig, StaticWithAnEndpointTakesItsMasterFromIt) {
  for (std::vector<std::string> extra :
       {std::vector<std::string>{}, std::vector<std::string>{"--master_addr", "10.0.0.9"}}) {
    std::vector<std::string> argv{"--nnodes",        "2", "--node_rank", "1", "--rdzv_endpoint",
                                  "node-0.svc:29562"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto c = Build(argv);
    ASSERT_TRUE(c) << c.error().message;
    EXPECT_EQ(c->master_addr, "node-0.svc");
    EXPECT_EQ(c->master_port, 29562);
    EXPECT_EQ(c->endpoint_host, "node-0.svc");
  }
  auto plain = Build({"--nnodes", "2", "--node_rank", "1", "--master_addr", "10.0.0.9"});
  ASSERT_TRUE(plain) << plain.error().message;
  EXPECT_EQ(plain->master_addr, "10.0.0.9");
  EXPECT_EQ(plain->endpoint_host, "10.0.0.9");
}

TEST(DropinConfig, C10dWithoutAnEndpointIsLocalhost29400) {
  for (const char* nnodes : {"1", "2"}) {
    auto c = Build({"--nnodes", nnodes, "--rdzv-backend", "c10d"});
    ASSERT_TRUE(c) << c.error().message;
    EXPECT_EQ(c->endpoint_host, "localhost");
    EXPECT_EQ(c->endpoint_port, 29400);
  }
}

TEST(DropinConfig, StandaloneWarnsOnlyAboutTheCommandLine) {
  const EnvMap env = {
      {"PET_RDZV_BACKEND", "c10d"}, {"PET_RDZV_ENDPOINT", "master:29400"}, {"PET_RDZV_ID", "job7"}};
  auto quiet = Build({"--standalone", "--rdzv-backend", "c10d", "--rdzv-endpoint", "master:29400",
                      "--rdzv-id", "job7"},
                     env);
  ASSERT_TRUE(quiet) << quiet.error().message;
  EXPECT_TRUE(quiet->warnings.empty()) << quiet->warnings.front();
  auto loud = Build({"--standalone", "--rdzv-id", "mine"}, env);
  ASSERT_TRUE(loud);
  ASSERT_EQ(loud->warnings.size(), 1u);
  EXPECT_EQ(loud->warnings.front(), "--standalone: ignoring --rdzv-id mine");
}

TEST(DropinConfig, EmptyValuesThatCannotWork) {
  EXPECT_EQ(ErrorOf({"--rdzv_id="}), "--rdzv-id: must not be empty");
  EXPECT_EQ(ErrorOf({"--master_addr="}), "--master-addr: must not be empty");
  EXPECT_NE(ErrorOf({"--nnodes="}).find("--nnodes: ''"), std::string::npos);
  EXPECT_NE(ErrorOf({"--nproc_per_node="}).find("--nproc-per-node: ''"), std::string::npos);
  // torchrun runs with ROLE_NAME="".
  auto role = Build({"--role="});
  ASSERT_TRUE(role) << role.error().message;
  EXPECT_EQ(role->role, "");
  // An empty endpoint is "none given", as for torch.
  EXPECT_TRUE(Build({"--rdzv_endpoint=", "--rdzv_backend=c10d"}));
  // --standalone sets its own run id and host: empty ones do no harm there.
  EXPECT_TRUE(Build({"--standalone", "--rdzv_id=", "--master_addr="}));
}

}  // namespace
}  // namespace ftrun::launcher
