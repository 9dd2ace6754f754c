#include "launcher/config/launch_config.h"

#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>

#include "launcher/cli/torchrun_args.h"
#include "launcher/config/option_values.h"

namespace ftrun::launcher {
namespace {

TorchrunArgs Args(std::vector<std::string> argv) {
  argv.push_back("train.py");
  auto p = ParseTorchrunArgs(argv);
  EXPECT_EQ(p.action, ParsedCommandLine::Action::kRun) << p.error;
  return p.args;
}

Result<LaunchConfig> Build(std::vector<std::string> argv, EnvMap env = {}) {
  return BuildLaunchConfig(Args(std::move(argv)), env);
}

std::string ErrorOf(std::vector<std::string> argv, EnvMap env = {}) {
  auto c = Build(std::move(argv), std::move(env));
  return c ? std::string("(no error)") : c.error().message;
}

TEST(LaunchConfig, Defaults) {
  auto c = Build({});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->min_nodes, 1);
  EXPECT_EQ(c->max_nodes, 1);
  EXPECT_EQ(c->nproc_per_node, 1);
  EXPECT_EQ(c->backend, RendezvousBackend::kStatic);
  EXPECT_EQ(c->endpoint_host, "127.0.0.1");
  EXPECT_EQ(c->endpoint_port, 29500);
  EXPECT_EQ(c->run_id, "none");
  EXPECT_EQ(c->entry, EntryKind::kPython);
  EXPECT_EQ(c->python, "python3");
  EXPECT_EQ(c->shutdown_timeout, std::chrono::seconds(30));
  EXPECT_EQ(c->signals, (std::vector<int>{SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}));
  EXPECT_EQ(c->log_level, spdlog::level::info);
  EXPECT_EQ(c->rdzv.timeout.count(), 900);
  EXPECT_EQ(c->rdzv.rank, 0);
}

TEST(LaunchConfig, Nnodes) {
  auto c = Build({"--nnodes", "2:4", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h"});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->min_nodes, 2);
  EXPECT_EQ(c->max_nodes, 4);
  EXPECT_EQ(c->endpoint_port, 29400);  // c10d's default port
  for (const char* bad : {"0", "-1", "3:2", "1:2:3", "a", "1:", ":2", "0:2", ""}) {
    std::string e = ErrorOf({"--nnodes", bad});
    EXPECT_NE(e.find("--nnodes"), std::string::npos) << bad << ": " << e;
  }
}

TEST(LaunchConfig, StaticNnodesRangeWaitsForMax) {
  auto c = Build({"--nnodes", "1:2"});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->min_nodes, 2);
  EXPECT_FALSE(c->warnings.empty());
}

TEST(LaunchConfig, NprocPerNodeSpellings) {
  EXPECT_EQ(Build({"--nproc-per-node", "8"})->nproc_per_node, 8);
  for (const char* v : {"cpu", "gpu", "auto"}) {
    auto c = Build({"--nproc-per-node", v});
    ASSERT_TRUE(c) << v;
    EXPECT_EQ(c->nproc_spec, v);
  }
  for (const char* bad : {"0", "-2", "", "Four", "2.5", "gpu 2"}) {
    EXPECT_NE(ErrorOf({"--nproc-per-node", bad}).find("--nproc-per-node"), std::string::npos)
        << bad;
  }
}

// torchrun converts these with Python's int(): what a YAML block scalar or a hand-written
// launch line brings ("2\n", " 2", "+2", "1_0") starts the job there, so it must here.
TEST(LaunchConfig, NumbersAsPythonsIntReadsThem) {
  EXPECT_EQ(Build({"--nproc-per-node", " 2\n"})->nproc_per_node, 2);
  EXPECT_EQ(Build({"--nproc-per-node", "+1_0"})->nproc_per_node, 10);
  auto n = Build({"--nnodes", " 1:2 ", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h"});
  ASSERT_TRUE(n) << n.error().message;
  EXPECT_EQ(n->max_nodes, 2);
  auto r = Build({"--local-ranks-filter", "0, +1"});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->local_ranks_filter, (std::set<int>{0, 1}));
  for (const char* bad : {"0x2", "1__0", "_1", "2_", "2.0"}) {
    EXPECT_NE(ErrorOf({"--nproc-per-node", bad}).find("--nproc-per-node"), std::string::npos)
        << bad;
  }
}

TEST(OptionValues, PythonIntAndFloatText) {
  EXPECT_EQ(PythonIntText(" \t+1_000\n"), "1000");
  EXPECT_EQ(PythonIntText("-007"), "-007");
  EXPECT_EQ(PythonIntText("\v\f5\r"), "5");
  for (const char* bad :
       {"", " ", "+", "-", "0x10", "0b1", "1__0", "1_", "_1", "1.0", "1e3", "+-1", "1 2",
        "\x1c"
        "5"}) {
    EXPECT_FALSE(PythonIntText(bad)) << bad;
  }
  EXPECT_EQ(PythonFloatText(" 1_0.2_5e+0_1\n"), "10.25e01");
  EXPECT_EQ(PythonFloatText(".5"), ".5");
  EXPECT_EQ(PythonFloatText("1e5_0"), "1e50");
  EXPECT_EQ(PythonFloatText("5."), "5.");
  EXPECT_EQ(PythonFloatText("-InFinity"), "-infinity");
  EXPECT_EQ(PythonFloatText("+NaN"), "nan");
  for (const char* bad : {"", ".", "e3", "1e", "1e+", "0x1p-2", "1._5", "1_.5", "inf1", "nan(1)",
                          "1.5f", "1,5", "--1"}) {
    EXPECT_FALSE(PythonFloatText(bad)) << bad;
  }
  EXPECT_EQ(PythonInt(" 42 "), 42);
  EXPECT_FALSE(PythonInt("99999999999"));
}

TEST(LaunchConfig, ResolveNprocPerNode) {
  auto c = *Build({"--nproc-per-node", "cpu"});
  ASSERT_TRUE(ResolveNprocPerNode(c, HostFacts{6, 0, "/x"}));
  EXPECT_EQ(c.nproc_per_node, 6);
  c.nproc_spec = "auto";
  ASSERT_TRUE(ResolveNprocPerNode(c, HostFacts{6, 0, "/x"}));
  EXPECT_EQ(c.nproc_per_node, 6);
  ASSERT_TRUE(ResolveNprocPerNode(c, HostFacts{6, 2, "/x"}));
  EXPECT_EQ(c.nproc_per_node, 2);
  c.nproc_spec = "gpu";
  ASSERT_TRUE(ResolveNprocPerNode(c, HostFacts{6, 4, "/x"}));
  EXPECT_EQ(c.nproc_per_node, 4);
  auto none = ResolveNprocPerNode(c, HostFacts{6, 0, "/proc/driver/nvidia/gpus"});
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().message.find("no NVIDIA GPU"), std::string::npos);
  EXPECT_NE(none.error().message.find("--nproc-per-node gpu"), std::string::npos);
}

TEST(LaunchConfig, GpuCountFromFakeProcTree) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / "ftrun_fake_nvidia";
  fs::remove_all(dir);
  for (const char* bus : {"0000:01:00.0", "0000:02:00.0", "0000:03:00.0"}) {
    fs::create_directories(dir / bus);
    std::ofstream(dir / bus / "information") << "Model: fake\n";
  }
  EXPECT_EQ(DetectHostFacts({}, dir.string()).gpu_count, 3);
  EXPECT_EQ(DetectHostFacts({{"CUDA_VISIBLE_DEVICES", "1,2"}}, dir.string()).gpu_count, 2);
  EXPECT_EQ(DetectHostFacts({{"CUDA_VISIBLE_DEVICES", ""}}, dir.string()).gpu_count, 0);
  EXPECT_EQ(DetectHostFacts({}, (dir / "missing").string()).gpu_count, 0);
  EXPECT_GE(DetectHostFacts({}, dir.string()).cpu_count, 1);
  fs::remove_all(dir);
}

TEST(LaunchConfig, CudaVisibleDevicesRule) {
  EXPECT_EQ(CountVisibleGpus(4, std::nullopt), 4);
  EXPECT_EQ(CountVisibleGpus(4, "0,1"), 2);
  EXPECT_EQ(CountVisibleGpus(4, "0,7,1"), 1);  // stops at the first invalid ordinal
  EXPECT_EQ(CountVisibleGpus(4, "-1"), 0);
  EXPECT_EQ(CountVisibleGpus(4, "GPU-abc,GPU-def"), 2);
  EXPECT_EQ(CountVisibleGpus(0, "0,1"), 0);
  EXPECT_EQ(CountVisibleGpus(4, "1,1"), 1);
}

TEST(LaunchConfig, EntryPoints) {
  EXPECT_EQ(Build({"-m"})->entry, EntryKind::kModule);
  EXPECT_EQ(Build({"--no-python"})->entry, EntryKind::kNoPython);
  EXPECT_EQ(Build({"--run-path"})->entry, EntryKind::kRunPath);
  EXPECT_EQ(Build({"--run-path", "--no-python"})->entry, EntryKind::kRunPath);
  EXPECT_EQ(Build({"--run-path", "-m"})->entry, EntryKind::kRunPath) << "torchrun ignores -m";
  EXPECT_NE(ErrorOf({"-m", "--no-python"}).find("--no-python"), std::string::npos);
  EXPECT_EQ(Build({}, {{"PYTHON_EXEC", "/opt/py/bin/python"}})->python, "/opt/py/bin/python");
  EXPECT_EQ(ErrorOf({}, {{"PYTHON_EXEC", ""}}), "PYTHON_EXEC is set but empty");
  EXPECT_EQ(ErrorOf({"-m"}, {{"PYTHON_EXEC", ""}}), "PYTHON_EXEC is set but empty");
  EXPECT_TRUE(Build({"--no-python"}, {{"PYTHON_EXEC", ""}})) << "not read for --no-python";
}

TEST(LaunchConfig, Rendezvous) {
  auto c = Build({"--rdzv-backend", "c10d", "--rdzv-endpoint", "[::1]:1234", "--rdzv-id", "j",
                  "--rdzv-conf", "join_timeout=5,last_call_timeout=1.5,is_host=yes"});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->backend, RendezvousBackend::kDynamic);
  EXPECT_EQ(c->endpoint_host, "::1");
  EXPECT_EQ(c->endpoint_port, 1234);
  EXPECT_EQ(c->run_id, "j");
  EXPECT_DOUBLE_EQ(c->rdzv.join_timeout.count(), 5);
  EXPECT_DOUBLE_EQ(c->rdzv.last_call_timeout.count(), 1.5);
  EXPECT_EQ(c->rdzv.is_host, true);
  EXPECT_EQ(Build({"--rdzv-backend", "ftrun", "--rdzv-endpoint", "h:1"})->backend,
            RendezvousBackend::kDynamic);
  // etcd, etcd-v2 and etcd-v3 all go to etcd's v3 API; the endpoint may list members.
  for (const char* name : {"etcd", "etcd-v2", "etcd-v3"}) {
    auto e = Build({"--rdzv-backend", name, "--rdzv-endpoint", "e0:2379,e1,[::1]:2381"});
    ASSERT_TRUE(e) << name << ": " << e.error().message;
    EXPECT_EQ(e->backend, RendezvousBackend::kEtcd);
    EXPECT_EQ(e->etcd_endpoints, (std::vector<std::string>{"e0:2379", "e1:2379", "[::1]:2381"}));
  }
  EXPECT_NE(ErrorOf({"--rdzv-backend", "etcd"}).find("--rdzv-endpoint: required"),
            std::string::npos);
  EXPECT_NE(
      ErrorOf({"--rdzv-backend", "etcd", "--rdzv-endpoint", "h:99999"}).find("not a port number"),
      std::string::npos);
  EXPECT_NE(ErrorOf({"--rdzv-backend", "etcd", "--rdzv-endpoint", "h", "--rdzv-conf",
                     "protocol=https,key=/k"})
                .find("cert and key go together"),
            std::string::npos);
  EXPECT_NE(ErrorOf({"--rdzv-backend", "etcd", "--rdzv-endpoint", "h", "--rdzv-conf",
                     "protocol=https,cacert=/nonexistent/ca.pem"})
                .find("cannot read '/nonexistent/ca.pem'"),
            std::string::npos);
  EXPECT_NE(
      ErrorOf({"--rdzv-backend", "etcd", "--rdzv-endpoint", "h", "--rdzv-conf", "etcd_prefix=nope"})
          .find("etcd_prefix must start with '/'"),
      std::string::npos);
  EXPECT_NE(ErrorOf({"--rdzv-backend", "zk"}).find("unknown backend"), std::string::npos);
  EXPECT_NE(
      ErrorOf({"--rdzv-backend", "c10d", "--rdzv-endpoint", "h:99999"}).find("--rdzv-endpoint"),
      std::string::npos);
  EXPECT_NE(ErrorOf({"--rdzv-conf", "timeout="}).find("timeout"), std::string::npos);
  EXPECT_NE(ErrorOf({"--rdzv-conf", "join_timeout=abc"}).find("join_timeout"), std::string::npos);
  EXPECT_NE(ErrorOf({"--master-port", "70000"}).find("--master-port"), std::string::npos);
  EXPECT_NE(ErrorOf({"--nnodes", "2", "--node-rank", "2"}).find("--node-rank"), std::string::npos);
}

TEST(LaunchConfig, StaticEndpointFromMasterAddrAndPort) {
  auto c = Build(
      {"--nnodes", "2", "--node-rank", "1", "--master-addr", "10.1.2.3", "--master-port", "4000"});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->endpoint_host, "10.1.2.3");
  EXPECT_EQ(c->endpoint_port, 4000);
  EXPECT_EQ(c->rdzv.rank, 1);
}

TEST(LaunchConfig, Standalone) {
  auto c = Build({"--standalone", "--rdzv-id", "ignored"});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_TRUE(c->standalone);
  EXPECT_EQ(c->backend, RendezvousBackend::kDynamic);
  EXPECT_EQ(c->run_id.size(), 36u);  // a uuid4
  EXPECT_NE(c->run_id, "ignored");
  EXPECT_NE(c->run_id, Build({"--standalone"})->run_id);
  EXPECT_NE(ErrorOf({"--standalone", "--nnodes", "2"}).find("--standalone"), std::string::npos);
}

TEST(LaunchConfig, ShutdownTimeout) {
  EXPECT_EQ(Build({"--shutdown-timeout", "5"})->shutdown_timeout, std::chrono::seconds(5));
  EXPECT_EQ(Build({}, {{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "7"}})->shutdown_timeout,
            std::chrono::seconds(7));
  EXPECT_EQ(Build({"--shutdown-timeout", "2"}, {{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "7"}})
                ->shutdown_timeout,
            std::chrono::seconds(2));
  EXPECT_NE(ErrorOf({}, {{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "soon"}})
                .find("TORCH_ELASTIC_SHUTDOWN_TIMEOUT"),
            std::string::npos);
}

TEST(LaunchConfig, Signals) {
  EXPECT_EQ(*ParseSignalList("SIGTERM, usr1,HUP,2"),
            (std::vector<int>{SIGTERM, SIGUSR1, SIGHUP, SIGINT}));
  EXPECT_NE(ErrorOf({"--signals-to-handle", "SIGFOO"}).find("SIGFOO"), std::string::npos);
  EXPECT_NE(ErrorOf({"--signals-to-handle", "SIGKILL"}).find("cannot be handled"),
            std::string::npos);
  EXPECT_EQ(SignalName(SIGTERM), "SIGTERM");
  EXPECT_EQ(SignalName(SIGKILL), "SIGKILL");
}

TEST(LaunchConfig, StdSpecs) {
  EXPECT_EQ(*ParseStdSpec("-r", "3", 2), (std::vector<int>{3, 3}));
  EXPECT_EQ(*ParseStdSpec("-r", "0:3,2:1", 4), (std::vector<int>{3, 0, 1, 0}));
  EXPECT_EQ(*ParseStdSpec("-r", "5:1", 2), (std::vector<int>{0, 0}));
  for (const char* bad : {"4", "10:1", "0:4", "0:1,", "x", ""}) {
    EXPECT_NE(ErrorOf({"--redirects", bad}).find("--redirects"), std::string::npos) << bad;
    EXPECT_NE(ErrorOf({"--tee", bad}).find("--tee"), std::string::npos) << bad;
  }
}

TEST(LaunchConfig, LogOptions) {
  auto c = Build({"--local-ranks-filter", "0,2", "--duplicate-stdout-filters", "loss,,acc,step",
                  "--duplicate-stderr-filters", ""});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->local_ranks_filter, (std::set<int>{0, 2}));
  EXPECT_EQ(c->duplicate_stdout_filters, (std::vector<std::string>{"loss,acc", "step"}));
  EXPECT_TRUE(c->duplicate_stderr_filters.empty());
  EXPECT_NE(ErrorOf({"--local-ranks-filter", "0,a"}).find("--local-ranks-filter"),
            std::string::npos);
  EXPECT_EQ(Build({}, {{"LOGLEVEL", "WARNING"}})->log_level, spdlog::level::warn);
  EXPECT_EQ(Build({"--log-level", "debug"}, {{"LOGLEVEL", "ERROR"}})->log_level,
            spdlog::level::debug);
  EXPECT_NE(ErrorOf({}, {{"LOGLEVEL", "loud"}}).find("LOGLEVEL"), std::string::npos);
  EXPECT_FALSE(Build({"--logs-specs", "x"})->warnings.empty());
  EXPECT_EQ(
      Build({}, {{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "[${rank}]"}})->line_prefix_template,
      "[${rank}]");
}

TEST(LaunchConfig, ValueErrors) {
  EXPECT_NE(ErrorOf({"--max-restarts", "-1"}).find("--max-restarts"), std::string::npos);
  EXPECT_NE(ErrorOf({"--monitor-interval", "0"}).find("--monitor-interval"), std::string::npos);
  for (const char* opt : {"--monitor-interval", "--save-timeout", "--hang-timeout",
                          "--network-check-timeout", "--switchbox-timeout"}) {
    EXPECT_NE(ErrorOf({opt, "1e12"})
                  .find(std::string(opt) + ": 1e+12 seconds is more than "
                                           "ftrun accepts"),
              std::string::npos)
        << opt;
  }
}

TEST(LaunchConfig, CommaList) {
  EXPECT_EQ(SplitCommaList("a,b"), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(SplitCommaList("a,,b"), (std::vector<std::string>{"a,b"}));
  EXPECT_EQ(SplitCommaList(""), (std::vector<std::string>{""}));
}

TEST(LaunchConfig, FlashMemoryBudgetFromTheOptionOrTheEnvironment) {
  EXPECT_EQ(Build({"--flash-memory-budget", "3G"}, {})->flash_memory_budget, uint64_t{3} << 30);
  EXPECT_EQ(Build({"--flash-memory-budget", "512MiB"}, {{"FTRUN_FLASH_MEMORY_BUDGET", "1K"}})
                ->flash_memory_budget,
            uint64_t{512} << 20);  // the option wins
  auto from_env = Build({}, {{"FTRUN_FLASH_MEMORY_BUDGET", "1048576"}});
  EXPECT_EQ(from_env->flash_memory_budget, uint64_t{1} << 20);
  EXPECT_EQ(FlashMemoryBudget(*from_env), uint64_t{1} << 20);
  auto by_default = Build({}, {});
  EXPECT_EQ(by_default->flash_memory_budget, 0u);
  EXPECT_GT(FlashMemoryBudget(*by_default), 0u);  // half of the host's memory
  EXPECT_NE(ErrorOf({"--flash-memory-budget", "12Q"})
                .find("--flash-memory-budget: '12Q' is not a size such as 64MiB, 1G"),
            std::string::npos);
  EXPECT_NE(ErrorOf({"--flash-memory-budget", "99999999999T"}).find("is too large"),
            std::string::npos);
  auto env_error = Build({}, {{"FTRUN_FLASH_MEMORY_BUDGET", "0"}});
  ASSERT_FALSE(env_error);
  EXPECT_NE(env_error.error().message.find("FTRUN_FLASH_MEMORY_BUDGET: '0' must be at least"),
            std::string::npos);
}

TEST(LaunchConfig, FtrunFlashLoanIsZeroOrOne) {
  EXPECT_TRUE(Build({}, {})->flash_loan);
  EXPECT_TRUE(Build({}, {{"FTRUN_FLASH_LOAN", "1"}})->flash_loan);
  EXPECT_FALSE(Build({}, {{"FTRUN_FLASH_LOAN", "0"}})->flash_loan);
  for (const char* bad : {"", "yes", "2"}) {
    auto refused = Build({}, {{"FTRUN_FLASH_LOAN", bad}});
    ASSERT_FALSE(refused) << bad;
    EXPECT_NE(refused.error().message.find("FTRUN_FLASH_LOAN must be 0 or 1"), std::string::npos)
        << refused.error().message;
  }
}

}  // namespace
}  // namespace ftrun::launcher
