#include "launcher/workers/worker_env.h"

#include <gtest/gtest.h>

#include "launcher/cli/torchrun_args.h"
#include "launcher/personality/torchrun/torchrun_plan.h"
#include "launcher/workers/template.h"

namespace ftrun::launcher {
namespace {

LaunchConfig Config(std::vector<std::string> argv) {
  argv.push_back("train.py");
  argv.push_back("--rank=${local_rank}");
  auto p = ParseTorchrunArgs(argv);
  EXPECT_EQ(p.action, ParsedCommandLine::Action::kRun) << p.error;
  auto c = BuildLaunchConfig(p.args, {});
  EXPECT_TRUE(c) << c.error().message;
  return *c;
}

rendezvous::NodeAssignment TwoNodesSecond() {
  rendezvous::NodeAssignment a;
  a.round = 3;
  a.restart_count = 2;
  a.max_restarts = 5;
  a.group_rank = 1;
  a.group_world_size = 2;
  a.base_rank = 2;
  a.world_size = 4;
  a.master_addr = "10.0.0.1";
  a.master_port = 41234;
  return a;
}

TEST(WorkerEnv, TorchrunVariables) {
  LaunchConfig c = Config({"--nproc-per-node", "2", "--nnodes", "2", "--node-rank", "1",
                           "--max-restarts", "5", "--rdzv-id", "job42"});
  EnvMap agent = {{"PATH", "/bin"}, {"OMP_NUM_THREADS", "1"}, {"USER_VAR", "x"}};
  auto a = TwoNodesSecond();
  EnvMap env = BuildWorkerEnv({agent, c, a, 1, "/logs/attempt_2/1/error.json"});
  const EnvMap expected = {
      {"PATH", "/bin"},
      {"OMP_NUM_THREADS", "1"},
      {"USER_VAR", "x"},
      {"LOCAL_RANK", "1"},
      {"RANK", "3"},
      {"GROUP_RANK", "1"},
      {"ROLE_RANK", "3"},
      {"ROLE_NAME", "default"},
      {"LOCAL_WORLD_SIZE", "2"},
      {"WORLD_SIZE", "4"},
      {"GROUP_WORLD_SIZE", "2"},
      {"ROLE_WORLD_SIZE", "4"},
      {"MASTER_ADDR", "10.0.0.1"},
      {"MASTER_PORT", "41234"},
      {"TORCHELASTIC_RESTART_COUNT", "2"},
      {"TORCHELASTIC_MAX_RESTARTS", "5"},
      {"TORCHELASTIC_RUN_ID", "job42"},
      {"TORCHELASTIC_USE_AGENT_STORE", "True"},
      {"NCCL_ASYNC_ERROR_HANDLING", "1"},
      {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"},
      {"TORCHELASTIC_ERROR_FILE", "/logs/attempt_2/1/error.json"},
      {"TORCHELASTIC_SIGNALS_TO_HANDLE", "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1,SIGUSR2"},
  };
  EXPECT_EQ(env, expected);
}

// The agent hosts the workers' store unless FTRUN_AGENT_STORE turns it off (then worker rank 0
// hosts torch's store, as torchrun's c10d backend does in torch 1.13).
TEST(WorkerEnv, AgentStoreCanBeTurnedOff) {
  LaunchConfig c = Config({"--nproc-per-node", "2"});
  auto a = TwoNodesSecond();
  for (const char* off : {"0", "false", "OFF", "no"}) {
    EnvMap agent = {{"FTRUN_AGENT_STORE", off}};
    EXPECT_FALSE(AgentStoreEnabled(agent)) << off;
    EXPECT_EQ(BuildWorkerEnv({agent, c, a, 0, ""}).at("TORCHELASTIC_USE_AGENT_STORE"), "False");
  }
  for (const char* on : {"1", "true", ""}) {
    EnvMap agent = {{"FTRUN_AGENT_STORE", on}};
    EXPECT_TRUE(AgentStoreEnabled(agent)) << on;
  }
}

TEST(WorkerEnv, AgentValuesOfNcclVariablesWin) {
  LaunchConfig c = Config({});
  EnvMap agent = {{"NCCL_ASYNC_ERROR_HANDLING", "0"}, {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "3"}};
  rendezvous::NodeAssignment a;
  EnvMap env = BuildWorkerEnv({agent, c, a, 0, ""});
  EXPECT_EQ(env["NCCL_ASYNC_ERROR_HANDLING"], "0");
  EXPECT_EQ(env["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "3");
  EXPECT_EQ(env["TORCHELASTIC_ERROR_FILE"], "");
}

TEST(WorkerEnv, VirtualLocalRank) {
  LaunchConfig c = Config({"--nproc-per-node", "3", "--virtual-local-rank"});
  rendezvous::NodeAssignment a;
  EnvMap env = BuildWorkerEnv({{}, c, a, 2, ""});
  EXPECT_EQ(env["LOCAL_RANK"], "0");
  EXPECT_EQ(env["RANK"], "2");
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "2");
  EnvMap env2 = BuildWorkerEnv({{{"CUDA_VISIBLE_DEVICES", "4,5,6"}}, c, a, 1, ""});
  EXPECT_EQ(env2["CUDA_VISIBLE_DEVICES"], "5");
}

TEST(WorkerEnv, OmpNumThreadsRule) {
  EnvMap env;
  EXPECT_FALSE(ApplyOmpNumThreadsRule(env, 1));
  EXPECT_EQ(env.count("OMP_NUM_THREADS"), 0u);
  EXPECT_TRUE(ApplyOmpNumThreadsRule(env, 2));
  EXPECT_EQ(env["OMP_NUM_THREADS"], "1");
  EnvMap set = {{"OMP_NUM_THREADS", "8"}};
  EXPECT_FALSE(ApplyOmpNumThreadsRule(set, 4));
  EXPECT_EQ(set["OMP_NUM_THREADS"], "8");
  EXPECT_NE(std::string(kOmpBanner).find("Setting OMP_NUM_THREADS environment variable"),
            std::string::npos);
}

TEST(WorkerCommand, PythonModuleNoPythonRunPath) {
  LaunchConfig c = Config({});
  c.python = "/usr/bin/python3";
  auto cmd = BuildWorkerCommand(c, 3);
  EXPECT_EQ(cmd.program, "/usr/bin/python3");
  EXPECT_EQ(cmd.args, (std::vector<std::string>{"-u", "train.py", "--rank=3"}));
  c.entry = EntryKind::kModule;
  EXPECT_EQ(BuildWorkerCommand(c, 0).args,
            (std::vector<std::string>{"-u", "-m", "train.py", "--rank=0"}));
  c.entry = EntryKind::kNoPython;
  cmd = BuildWorkerCommand(c, 1);
  EXPECT_EQ(cmd.program, "train.py");
  EXPECT_EQ(cmd.args, (std::vector<std::string>{"--rank=1"}));
  c.entry = EntryKind::kRunPath;
  cmd = BuildWorkerCommand(c, 1);
  EXPECT_EQ(cmd.args.at(1), "-c");
  EXPECT_EQ(cmd.args.at(3), "train.py");
}

TEST(Template, SafeSubstituteLikePython) {
  const std::map<std::string, std::string> v = {{"local_rank", "7"}};
  EXPECT_EQ(SafeSubstitute("${local_rank}", v), "7");
  EXPECT_EQ(SafeSubstitute("--x=$local_rank", v), "--x=7");
  EXPECT_EQ(SafeSubstitute("$local_rank.log", v), "7.log");
  EXPECT_EQ(SafeSubstitute("$$local_rank", v), "$local_rank");
  EXPECT_EQ(SafeSubstitute("$local_rankX", v), "$local_rankX");
  EXPECT_EQ(SafeSubstitute("${other} $HOME $", v), "${other} $HOME $");
  EXPECT_EQ(SafeSubstitute("${local_rank", v), "${local_rank");
  EXPECT_EQ(SafeSubstitute("cost $5", v), "cost $5");
  EXPECT_EQ(SafeSubstitute("[${role_name}${local_rank}]:",
                           {{"role_name", "trainer"}, {"local_rank", "0"}}),
            "[trainer0]:");
}

}  // namespace
}  // namespace ftrun::launcher
