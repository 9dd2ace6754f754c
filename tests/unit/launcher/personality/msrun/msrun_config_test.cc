#include "launcher/personality/msrun/msrun_config.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "launcher/cli/msrun_args.h"

namespace ftrun::launcher {
namespace {

using std::chrono::duration;

// `argv` with train.py appended (unless it names a script itself), parsed as msrun's.
MsrunArgs Args(std::vector<std::string> argv, const std::string& script = "train.py") {
  argv.push_back(script);
  auto p = ParseMsrunArgs(argv);
  EXPECT_EQ(p.action, ParsedMsrun::Action::kRun) << p.error;
  return p.args;
}

const std::vector<int> kEightCpus = {0, 1, 2, 3, 4, 5, 6, 7};

Result<MsrunConfig> Build(std::vector<std::string> argv, EnvMap env = {},
                          const std::vector<int>& cpus = kEightCpus) {
  return BuildMsrunConfig(Args(std::move(argv)), env, cpus);
}

MsrunConfig Ok(std::vector<std::string> argv, EnvMap env = {},
               const std::vector<int>& cpus = kEightCpus) {
  auto c = Build(std::move(argv), std::move(env), cpus);
  EXPECT_TRUE(c) << c.error().message;
  return c ? *c : MsrunConfig{};
}

std::string ErrorOf(std::vector<std::string> argv, EnvMap env = {},
                    const std::vector<int>& cpus = kEightCpus) {
  auto c = Build(std::move(argv), std::move(env), cpus);
  return c ? std::string("(no error)") : c.error().message;
}

bool HasWarning(const MsrunConfig& c, const std::string& needle) {
  for (const auto& w : c.warnings) {
    if (w.find(needle) != std::string::npos) return true;
  }
  return false;
}

using Cmd = std::vector<std::string>;

TEST(MsrunConfig, Defaults) {
  MsrunConfig c = Ok({});
  EXPECT_EQ(c.worker_num, 8);
  EXPECT_EQ(c.local_worker_num, 8);
  EXPECT_EQ(c.node_rank, -1);
  EXPECT_EQ(c.master_addr, "127.0.0.1");
  EXPECT_EQ(c.master_port, 8118);
  EXPECT_EQ(c.log_dir, "");
  EXPECT_FALSE(c.join);
  EXPECT_EQ(c.cluster_time_out, 600);
  EXPECT_EQ(c.bind_core.mode, CpuBinding::Mode::kOff);
  EXPECT_FALSE(c.simulation);
  EXPECT_EQ(c.rank_size, "8");
  EXPECT_FALSE(c.tail_ranks.has_value());
  EXPECT_EQ(c.command, (Cmd{"python", "train.py"}));
  EXPECT_TRUE(c.warnings.empty());
  EXPECT_EQ(c.launch.min_nodes, 1);
  EXPECT_EQ(c.launch.max_nodes, 1);
  EXPECT_EQ(c.launch.nproc_per_node, 8);
  EXPECT_EQ(c.launch.max_restarts, 0);
  EXPECT_TRUE(c.launch.host_by_address);
  EXPECT_EQ(c.launch.entry, EntryKind::kNoPython);
  EXPECT_EQ(c.launch.run_id, "msrun");
  EXPECT_EQ(c.launch.survivor_grace.count(), 0);
  EXPECT_EQ(c.launch.save_timeout, duration<double>(180));
}

TEST(MsrunConfig, PythonPrefixRule) {
  auto cmd = [](const std::string& script, std::vector<std::string> args = {}) {
    std::vector<std::string> argv = {script};
    argv.insert(argv.end(), args.begin(), args.end());
    auto p = ParseMsrunArgs(argv);
    EXPECT_EQ(p.action, ParsedMsrun::Action::kRun) << p.error;
    auto c = BuildMsrunConfig(p.args, {}, kEightCpus);
    EXPECT_TRUE(c) << c.error().message;
    return c ? c->command : Cmd{};
  };
  EXPECT_EQ(cmd("train.py", {"--lr", "1"}), (Cmd{"python", "train.py", "--lr", "1"}));
  EXPECT_EQ(cmd("python", {"-u", "train.py"}), (Cmd{"python", "-u", "train.py"}));
  EXPECT_EQ(cmd("python3", {"train.py"}), (Cmd{"python3", "train.py"}));
  EXPECT_EQ(cmd("pytest", {"-x", "t.py"}), (Cmd{"pytest", "-x", "t.py"}));
  // msrun's rule is by name only: anything else runs under python, even a path to python.
  EXPECT_EQ(cmd("/usr/bin/python3", {"t.py"}), (Cmd{"python", "/usr/bin/python3", "t.py"}));
  EXPECT_EQ(cmd("run.sh"), (Cmd{"python", "run.sh"}));
}

TEST(MsrunConfig, TheAgentRunsTheCommandAsIs) {
  MsrunConfig c = Ok({"--worker_num", "2", "--local_worker_num", "2"});
  EXPECT_EQ(c.launch.entry, EntryKind::kNoPython);
  EXPECT_EQ(c.launch.script, "python");
  EXPECT_EQ(c.launch.script_args, (Cmd{"train.py"}));
  EXPECT_EQ(c.launch.nproc_per_node, 2);
}

TEST(MsrunConfig, WorkerCounts) {
  EXPECT_EQ(ErrorOf({"--worker_num", "0"}), "--worker_num: must be greater than 0, got 0");
  EXPECT_EQ(ErrorOf({"--worker_num", "-2", "--local_worker_num", "1"}),
            "--worker_num: must be greater than 0, got -2");
  EXPECT_EQ(ErrorOf({"--local_worker_num", "0"}),
            "--local_worker_num: must be greater than 0, got 0");
  EXPECT_EQ(ErrorOf({"--worker_num", "8", "--local_worker_num", "9"}),
            "--local_worker_num: 9 exceeds --worker_num 8");
  const std::string e = ErrorOf({"--worker_num", "8", "--local_worker_num", "3"});
  EXPECT_EQ(e.rfind("--local_worker_num: 3 does not divide --worker_num 8", 0), 0u) << e;
}

TEST(MsrunConfig, NodesFromWorkerNumbers) {
  MsrunConfig c = Ok({"--worker_num", "8", "--local_worker_num", "2", "--node_rank", "3"});
  EXPECT_EQ(c.launch.min_nodes, 4);
  EXPECT_EQ(c.launch.max_nodes, 4);
  EXPECT_EQ(c.launch.nproc_per_node, 2);
}

TEST(MsrunConfig, NodeRankOutOfRange) {
  const std::string e =
      ErrorOf({"--worker_num", "4", "--local_worker_num", "2", "--node_rank", "2"});
  EXPECT_EQ(e.rfind("--node_rank: 2 is not below the 2 nodes", 0), 0u) << e;
  EXPECT_TRUE(Build({"--worker_num", "4", "--local_worker_num", "2", "--node_rank", "1"}));
}

TEST(MsrunConfig, NodeRankIgnoredWithAWarningOnOneNode) {
  MsrunConfig c = Ok({"--worker_num", "2", "--local_worker_num", "2", "--node_rank", "3"});
  EXPECT_TRUE(HasWarning(c, "'node_rank': [3] will be ignored"))
      << ::testing::PrintToString(c.warnings);
  EXPECT_EQ(c.launch.node_rank, 0);
  EXPECT_EQ(c.launch.backend, RendezvousBackend::kStatic);
  for (const char* quiet : {"0", "-1"}) {
    SCOPED_TRACE(quiet);
    EXPECT_TRUE(Ok({"--worker_num", "2", "--local_worker_num", "2", "--node_rank", quiet})
                    .warnings.empty());
  }
}

TEST(MsrunConfig, JoinIsAPythonLiteral) {
  EXPECT_TRUE(Ok({"--join", "True"}).join);
  EXPECT_TRUE(Ok({"--join", "1"}).join);
  EXPECT_FALSE(Ok({"--join", "False"}).join);
  EXPECT_FALSE(Ok({"--join", "0"}).join);
  for (const char* bad : {"maybe", "true", "yes", ""}) {
    SCOPED_TRACE(bad);
    EXPECT_EQ(
        ErrorOf({"--join", bad}).rfind("--join: invalid choice: '" + std::string(bad) + "'", 0),
        0u);
  }
}

TEST(MsrunConfig, MasterPortRange) {
  EXPECT_EQ(ErrorOf({"--master_port", "70000"}),
            "--master_port: 70000 is not a port number (1-65535)");
  EXPECT_EQ(ErrorOf({"--master_port", "0"}), "--master_port: 0 is not a port number (1-65535)");
  EXPECT_EQ(ErrorOf({"--master_addr", ""}), "--master_addr: must not be empty");
}

TEST(MsrunConfig, SimulationRunsOneWorkerWithTheSimRank) {
  MsrunConfig c = Ok(
      {"--sim_level", "1", "--sim_rank_id", "5", "--worker_num", "16", "--local_worker_num", "8"});
  EXPECT_TRUE(c.simulation);
  EXPECT_EQ(c.sim_level, 1);
  EXPECT_EQ(c.sim_rank_id, 5);
  EXPECT_EQ(c.local_worker_num, 1);
  EXPECT_EQ(c.launch.nproc_per_node, 1);
  EXPECT_EQ(c.launch.max_nodes, 1) << "simulation is one node";
  EXPECT_EQ(c.rank_size, "16");
}

TEST(MsrunConfig, SimulationWithoutSimRankRunsTheLocalWorkers) {
  MsrunConfig c = Ok({"--sim_level", "0", "--worker_num", "16", "--local_worker_num", "4"});
  EXPECT_TRUE(c.simulation);
  EXPECT_EQ(c.local_worker_num, 4);
  EXPECT_EQ(c.launch.max_nodes, 1);
}

TEST(MsrunConfig, SimulationFromTheEnvironmentReadsRankIdAndRankSize) {
  EnvMap env = {{"MS_SIMULATION_LEVEL", "1"}, {"RANK_ID", "3"}, {"RANK_SIZE", "32"}};
  MsrunConfig c = Ok({"--worker_num", "8", "--local_worker_num", "8"}, env);
  EXPECT_TRUE(c.simulation);
  EXPECT_EQ(c.sim_level, -1) << "the level is left in the environment";
  EXPECT_EQ(c.sim_rank_id, 3);
  EXPECT_EQ(c.local_worker_num, 1);
  EXPECT_EQ(c.rank_size, "32");
  // With --sim_level given, RANK_SIZE is --worker_num, as msrun does.
  MsrunConfig d = Ok({"--sim_level", "2", "--worker_num", "8", "--local_worker_num", "8"},
                     {{"RANK_SIZE", "32"}});
  EXPECT_EQ(d.rank_size, "8");
}

TEST(MsrunConfig, SimulationAbove128WorkersRunsOne) {
  MsrunConfig c = Ok({"--sim_level", "0", "--worker_num", "256", "--local_worker_num", "256"});
  EXPECT_EQ(c.local_worker_num, 1);
  EXPECT_EQ(c.sim_rank_id, 0);
  EXPECT_EQ(c.launch.nproc_per_node, 1);
  EXPECT_TRUE(HasWarning(c, "local worker num is set to 1"));
  EXPECT_EQ(
      Ok({"--sim_level", "0", "--worker_num", "128", "--local_worker_num", "128"}).local_worker_num,
      128);
}

TEST(MsrunConfig, BindCoreTrueSplitsTheCpusEvenly) {
  MsrunConfig c = Ok({"--worker_num", "4", "--local_worker_num", "4", "--bind_core", "True"});
  ASSERT_EQ(c.bind_core.mode, CpuBinding::Mode::kAuto);
  EXPECT_EQ(c.bind_core.auto_cpus, (std::vector<std::vector<int>>{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  // Any case; the CPUs this process may use, whatever their numbers; a remainder is unused.
  MsrunConfig d = Ok({"--worker_num", "2", "--local_worker_num", "2", "--bind_core", "true"}, {},
                     {1, 3, 5, 8, 9});
  EXPECT_EQ(d.bind_core.auto_cpus, (std::vector<std::vector<int>>{{1, 3}, {5, 8}}));
  EXPECT_TRUE(d.warnings.empty());
}

TEST(MsrunConfig, BindCoreTrueWithTooFewCpusWarnsAndDoesNotBind) {
  MsrunConfig c =
      Ok({"--worker_num", "4", "--local_worker_num", "4", "--bind_core", "TRUE"}, {}, {0, 1});
  EXPECT_EQ(c.bind_core.mode, CpuBinding::Mode::kAuto);
  EXPECT_TRUE(c.bind_core.auto_cpus.empty());
  EXPECT_TRUE(HasWarning(c, "2 CPU(s) cannot be split among 4 workers"))
      << ::testing::PrintToString(c.warnings);
}

TEST(MsrunConfig, BindCoreFalse) {
  EXPECT_EQ(Ok({"--bind_core", "False"}).bind_core.mode, CpuBinding::Mode::kOff);
  EXPECT_EQ(Ok({"--bind_core", "false"}).bind_core.mode, CpuBinding::Mode::kOff);
}

TEST(MsrunConfig, BindCoreJsonKeepsTheOrderAsWritten) {
  MsrunConfig c =
      Ok({"--worker_num", "2", "--local_worker_num", "2", "--bind_core",
          R"({"device1": ["4-7"], "scheduler": ["10-11"], "device0": ["0-1", "8-9"]})"});
  ASSERT_EQ(c.bind_core.mode, CpuBinding::Mode::kManual);
  EXPECT_EQ(c.bind_core.devices,
            (std::vector<std::pair<int, std::string>>{{1, "4-7"}, {0, "0-1,8-9"}}));
  EXPECT_EQ(c.bind_core.scheduler, "10-11");
  MsrunConfig d = Ok({"--bind_core", R"({"device0":["0-3"]})"});
  EXPECT_EQ(d.bind_core.devices, (std::vector<std::pair<int, std::string>>{{0, "0-3"}}));
  EXPECT_EQ(d.bind_core.scheduler, "");
}

TEST(MsrunConfig, BindCoreJsonErrorsNameTheOption) {
  EXPECT_EQ(ErrorOf({"--bind_core", R"({"cpu0":["0-1"]})"}),
            "--bind_core: key 'cpu0' must be in format 'deviceX' (X >= 0)");
  EXPECT_EQ(ErrorOf({"--bind_core", R"({"device":["0-1"]})"}),
            "--bind_core: key 'device' must be in format 'deviceX' (X >= 0)");
  for (const char* range :
       {R"({"device0":["0:3"]})", R"({"device0":["3"]})", R"({"device0":[3]})"}) {
    SCOPED_TRACE(range);
    EXPECT_EQ(ErrorOf({"--bind_core", range}).rfind("--bind_core: CPU range in 'device0'", 0), 0u);
  }
  EXPECT_EQ(ErrorOf({"--bind_core", R"({"device0":"0-3"})"}),
            "--bind_core: the value of 'device0' must be a list of CPU ranges");
  for (const char* not_json : {"maybe", "[\"0-3\"]", "{device0:", "1"}) {
    SCOPED_TRACE(not_json);
    EXPECT_EQ(ErrorOf({"--bind_core", not_json}),
              "--bind_core: '" + std::string(not_json) + "' is not True, False or a JSON object");
  }
}

TEST(MsrunConfig, TailWorkerLog) {
  EXPECT_FALSE(Ok({"--tail_worker_log", "-1"}).tail_ranks.has_value());
  EXPECT_FALSE(Ok({"--tail_worker_log", ""}).tail_ranks.has_value());
  EXPECT_EQ(Ok({"--tail_worker_log", "1"}).tail_ranks, (std::set<int>{1}));
  EXPECT_EQ(Ok({"--tail_worker_log", "2,0,5"}).tail_ranks, (std::set<int>{0, 2, 5}));
  EXPECT_EQ(ErrorOf({"--tail_worker_log", "0,x"}),
            "--tail_worker_log: 'x' is not a rank (expected e.g. 0,1)");
}

TEST(MsrunConfig, PassThroughValues) {
  MsrunConfig c = Ok({"--log_dir", "/tmp/ms", "--rank_table_file", "/etc/rt.json",
                      "--worker_log_name", "w_{ip}", "--max_restarts", "3"});
  EXPECT_EQ(c.log_dir, "/tmp/ms");
  EXPECT_EQ(c.launch.log_dir, "/tmp/ms");
  EXPECT_EQ(c.rank_table_file, "/etc/rt.json");
  EXPECT_EQ(c.worker_log_name, "w_{ip}");
  EXPECT_EQ(c.launch.max_restarts, 3);
}

TEST(MsrunConfig, TtpGraceFromMsEnableTft) {
  EXPECT_EQ(Ok({}, {{"TTP_OT", "30"}}).launch.survivor_grace.count(), 0)
      << "TTP_OT alone does not turn on the grace";
  for (const char* tft : {"{TTP:1}", "{UCE:1,TTP:0}", "ARF:1", "{TTP:1,UCE:1,ARF:1}"}) {
    SCOPED_TRACE(tft);
    MsrunConfig c = Ok({}, {{"MS_ENABLE_TFT", tft}, {"TTP_OT", "30"}});
    EXPECT_EQ(c.launch.survivor_grace, duration<double>(30));
    EXPECT_EQ(c.launch.save_timeout, duration<double>(30));
    EXPECT_EQ(c.launch.survivor_grace, duration<double>(30));
  }
  for (const char* off : {"{TTP:0}", "{TSP:1}", ""}) {
    SCOPED_TRACE(off);
    EXPECT_EQ(Ok({}, {{"MS_ENABLE_TFT", off}, {"TTP_OT", "30"}}).launch.survivor_grace.count(), 0);
  }
}

TEST(MsrunConfig, TtpGraceTimeoutSources) {
  EnvMap tft = {{"MS_ENABLE_TFT", "{TTP:1}"}};
  EXPECT_EQ(Ok({}, tft).launch.survivor_grace, duration<double>(180)) << "MindIO's default";
  EnvMap limit = tft;
  limit["TTP_NORMAL_ACTION_TIME_LIMIT"] = "45";
  EXPECT_EQ(Ok({}, limit).launch.survivor_grace, duration<double>(45));
  EnvMap both = limit;
  both["TTP_OT"] = "20";
  EXPECT_EQ(Ok({}, both).launch.survivor_grace, duration<double>(20)) << "TTP_OT first";
  EXPECT_EQ(Ok({"--save_timeout", "12.5"}, both).launch.survivor_grace, duration<double>(12.5));
  EnvMap bad = tft;
  bad["TTP_OT"] = "soon";
  EXPECT_EQ(ErrorOf({}, bad), "TTP_OT: 'soon' is not a number of seconds");
}

TEST(MsrunConfig, RendezvousPortDefaultsToMasterPortPlusOne) {
  MsrunConfig c = Ok({"--master_port", "9000", "--master_addr", "10.0.0.1"});
  EXPECT_EQ(c.master_port, 9000) << "the scheduler's port";
  EXPECT_EQ(c.launch.endpoint_host, "10.0.0.1");
  EXPECT_EQ(c.launch.endpoint_port, 9001);
  EXPECT_EQ(Ok({"--master_port", "9000", "--rdzv_port", "7777"}).launch.endpoint_port, 7777);
  EXPECT_EQ(ErrorOf({"--master_port", "65535"}), "--rdzv_port: 65536 is not a port number");
  EXPECT_EQ(ErrorOf({"--rdzv_port", "0"}), "--rdzv_port: 0 is not a port number");
}

TEST(MsrunConfig, StaticRendezvousWithNodeRankDynamicWithout) {
  MsrunConfig one = Ok({"--worker_num", "2", "--local_worker_num", "2"});
  EXPECT_EQ(one.launch.backend, RendezvousBackend::kStatic);
  EXPECT_EQ(one.launch.node_rank, 0);

  MsrunConfig fixed = Ok({"--worker_num", "4", "--local_worker_num", "2", "--node_rank", "1",
                          "--master_port", "9000"});
  EXPECT_EQ(fixed.launch.backend, RendezvousBackend::kStatic);
  EXPECT_EQ(fixed.launch.node_rank, 1);
  EXPECT_EQ(fixed.launch.max_nodes, 2);
  EXPECT_EQ(fixed.launch.endpoint_port, 9001);

  MsrunConfig assigned = Ok({"--worker_num", "4", "--local_worker_num", "2", "--master_addr",
                             "10.0.0.1", "--master_port", "9000"});
  EXPECT_EQ(assigned.launch.backend, RendezvousBackend::kDynamic);
  EXPECT_EQ(assigned.launch.min_nodes, 2);
  EXPECT_EQ(assigned.launch.max_nodes, 2);
  EXPECT_EQ(assigned.launch.endpoint_host, "10.0.0.1");
  EXPECT_EQ(assigned.launch.endpoint_port, 9001);
  EXPECT_TRUE(assigned.launch.host_by_address);
}

TEST(MsrunConfig, ClusterTimeOutBoundsTheRendezvous) {
  EXPECT_EQ(Ok({}).launch.rdzv.join_timeout, duration<double>(600));
  EXPECT_EQ(Ok({"--cluster_time_out", "42"}).launch.rdzv.join_timeout, duration<double>(42));
  EXPECT_GE(Ok({"--cluster_time_out", "-1"}).launch.rdzv.join_timeout,
            duration<double>(365.0 * 24 * 3600))
      << "negative: effectively forever";
  EXPECT_EQ(
      Ok({"--cluster_time_out", "42", "--rdzv_conf", "join_timeout=7"}).launch.rdzv.join_timeout,
      duration<double>(7))
      << "--rdzv_conf wins";
  EXPECT_EQ(Ok({"--cluster_time_out", "42"}).cluster_time_out, 42) << "MS_TOPO_TIMEOUT";
}

TEST(MsrunConfig, ClusterTimeOutBoundsTheStaticWaitForTheMasterToo) {
  MsrunConfig c = Ok({"--worker_num", "4", "--local_worker_num", "2", "--node_rank", "1",
                      "--cluster_time_out", "42"});
  EXPECT_EQ(c.launch.rdzv.timeout, duration<double>(42));
  EXPECT_EQ(Ok({"--cluster_time_out", "42", "--rdzv_conf", "timeout=9"}).launch.rdzv.timeout,
            duration<double>(9));
  EXPECT_EQ(Ok({"--rdzv_conf", "timeout=9"}).launch.rdzv.join_timeout, duration<double>(600))
      << "'timeout' given does not hide 'join_timeout'";
}

TEST(MsrunConfig, ClusterTimeOutZeroIsAccepted) {
  MsrunConfig c = Ok({"--cluster_time_out", "0"});
  EXPECT_EQ(c.cluster_time_out, 0) << "MS_TOPO_TIMEOUT as given";
  EXPECT_GT(c.launch.rdzv.join_timeout.count(), 0);
}

TEST(MsrunConfig, ExtensionErrorsAreUsageErrors) {
  EXPECT_EQ(ErrorOf({"--max_restarts", "-1"}), "--max-restarts: must be >= 0, got -1");
  EXPECT_NE(ErrorOf({"--rdzv_conf", "bogus"}), "(no error)");
}

TEST(MsrunConfigHelpers, CpuRangesAndPythonList) {
  EXPECT_EQ(CpuRanges({0, 1, 2, 3}), "0-3");
  EXPECT_EQ(CpuRanges({0, 1, 3, 5, 6}), "0-1,3,5-6");
  EXPECT_EQ(CpuRanges({7}), "7");
  EXPECT_EQ(CpuRanges({}), "");
  EXPECT_EQ(PythonIntList({0, 1, 2}), "[0, 1, 2]");
  EXPECT_EQ(PythonIntList({}), "[]");
}

}  // namespace
}  // namespace ftrun::launcher
