#include "launcher/personality/msrun/msrun_plan.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "launcher/cli/msrun_args.h"
#include "launcher/personality/msrun/msrun_config.h"
#include "tests/support/test_support.h"

namespace ftrun::launcher {
namespace {

using ftrun::testing::ReadFile;
using ftrun::testing::TempDir;

MsrunConfig Config(std::vector<std::string> argv, const EnvMap& env) {
  argv.push_back("train.py");
  auto p = ParseMsrunArgs(argv);
  EXPECT_EQ(p.action, ParsedMsrun::Action::kRun) << p.error;
  auto c = BuildMsrunConfig(p.args, env, {0, 1, 2, 3, 4, 5, 6, 7});
  EXPECT_TRUE(c) << c.error().message;
  return c ? *c : MsrunConfig{};
}

rendezvous::NodeAssignment Assignment(int base_rank, int restart_count = 0) {
  rendezvous::NodeAssignment a;
  a.round = static_cast<uint64_t>(restart_count);
  a.restart_count = restart_count;
  a.base_rank = base_rank;
  a.world_size = 4;
  a.master_addr = "127.0.0.1";
  a.master_port = 40000;
  return a;
}

// The environment every process inherits from the agent.
const EnvMap kAgentEnv = {{"PATH", "/usr/bin:/bin"}, {"HOME", "/home/u"}};
// What the agent adds to every worker (its control channel).
const EnvMap kExtraEnv = {{"FTRUN_CONTROL_SOCKET", "/run/ftrun/c.sock"}};

EnvMap With(EnvMap base, const EnvMap& add) {
  for (const auto& [k, v] : add) base[k] = v;
  return base;
}

// Each of `expected` is in `env` with its value.
void ExpectIn(const EnvMap& env, const EnvMap& expected) {
  for (const auto& [k, v] : expected) {
    ASSERT_EQ(env.count(k), 1u) << k;
    EXPECT_EQ(env.at(k), v) << k;
  }
}

// Runs Plan() with std::cout (its "Start worker process ..." lines) captured.
class MsrunPlan : public ::testing::Test {
 protected:
  std::vector<ProcessPlan> Plan(MsrunPlanner& p, const rendezvous::NodeAssignment& a) {
    std::streambuf* old = std::cout.rdbuf(out_.rdbuf());
    auto plans = p.Plan(a, kExtraEnv);
    std::cout.rdbuf(old);
    return plans;
  }

  // The planner of a node of the job `argv` (before the script) whose scheduler is at
  // 10.0.0.1, on the master node or not. `env` is the agent's environment (the configuration
  // reads it too), `log_base` the base of the workers' log names. Valid until the next call.
  MsrunPlanner& PlannerOf(std::vector<std::string> argv, bool master_node = true,
                          const EnvMap& env = kAgentEnv, const std::string& log_base = "worker") {
    planner_.reset();
    config_ = Config(std::move(argv), env);
    return planner_.emplace(config_, env, "10.0.0.1", master_node, log_base);
  }
  // The first round's plans of PlannerOf(argv, master_node), for ranks from `base_rank`.
  std::vector<ProcessPlan> PlanOf(std::vector<std::string> argv, bool master_node = true,
                                  int base_rank = 0) {
    return Plan(PlannerOf(std::move(argv), master_node), Assignment(base_rank));
  }
  std::string Printed() const { return out_.str(); }

  TempDir dir_;
  std::ostringstream out_;
  MsrunConfig config_;  // of PlannerOf: the planner keeps a reference
  std::optional<MsrunPlanner> planner_;
};

TEST_F(MsrunPlan, SingleNodeWorkersAndSchedulerWithMsrunsEnvironment) {
  auto plans = PlanOf({"--worker_num", "2", "--local_worker_num", "2", "--master_port", "9000",
                       "--cluster_time_out", "300", "--log_dir", dir_.path()});
  ASSERT_EQ(plans.size(), 3u);
  const EnvMap common = With(kAgentEnv, {{"RANK_SIZE", "2"},
                                         {"MS_WORKER_NUM", "2"},
                                         {"MS_SCHED_HOST", "10.0.0.1"},
                                         {"MS_SCHED_PORT", "9000"},
                                         {"MS_TOPO_TIMEOUT", "300"}});
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(i);
    const ProcessPlan& w = plans[i];
    EXPECT_EQ(w.local_rank, i);
    EXPECT_EQ(w.rank, i);
    EXPECT_EQ(w.program, "python");
    EXPECT_EQ(w.args, (std::vector<std::string>{"train.py"}));
    const std::string id = std::to_string(i);
    EXPECT_EQ(w.env, With(With(common, {{"DEVICE_ID", id},
                                        {"MS_NODE_ID", id},
                                        {"RANK_ID", id},
                                        {"MS_NODE_RANK", "-1"},
                                        {"MS_ROLE", "MS_WORKER"}}),
                          kExtraEnv));
  }
  const ProcessPlan& s = plans[2];
  EXPECT_EQ(s.local_rank, -1) << "an auxiliary process, not a rank";
  EXPECT_EQ(s.name, "scheduler");
  EXPECT_EQ(s.program, "python");
  EXPECT_EQ(s.args, (std::vector<std::string>{"train.py"}));
  EXPECT_EQ(s.env, With(common, {{"RANK_ID", "0"}, {"MS_ROLE", "MS_SCHED"}}));
  EXPECT_NE(Printed().find("Start worker process with rank id:1, log file:" + dir_.path() +
                           "/worker_1.log. Environment variable [RANK_ID=1] is exported."),
            std::string::npos)
      << Printed();
}

TEST_F(MsrunPlan, RankTableFileOnlyWhenGiven) {
  for (const auto& plan : PlanOf({"--worker_num", "1", "--local_worker_num", "1",
                                  "--rank_table_file", "/etc/hccl.json"})) {
    EXPECT_EQ(plan.env.at("RANK_TABLE_FILE"), "/etc/hccl.json") << plan.name;
  }
  for (const auto& plan : PlanOf({"--worker_num", "1", "--local_worker_num", "1"})) {
    EXPECT_EQ(plan.env.count("RANK_TABLE_FILE"), 0u) << plan.name;
  }
}

TEST_F(MsrunPlan, SecondNodeWithFixedNodeRank) {
  auto plans =
      PlanOf({"--worker_num", "4", "--local_worker_num", "2", "--node_rank", "1"}, false, 2);
  ASSERT_EQ(plans.size(), 2u) << "no scheduler off the master node";
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(plans[i].rank, 2 + i);
    ExpectIn(plans[i].env, {{"DEVICE_ID", std::to_string(i)},
                            {"MS_NODE_ID", std::to_string(2 + i)},
                            {"RANK_ID", std::to_string(2 + i)},
                            {"MS_NODE_RANK", "1"},
                            {"RANK_SIZE", "4"},
                            {"MS_WORKER_NUM", "4"}});
    EXPECT_EQ(plans[i].out.file, "worker_" + std::to_string(2 + i) + ".log");
  }
}

TEST_F(MsrunPlan, AssignedNodeRankStillExportsTheRanksAndMinusOne) {
  // ftrun knows every rank, so MS_NODE_ID/RANK_ID are set even with node_rank -1 (msrun
  // leaves them to MindSpore there); MS_NODE_RANK is -1 as msrun exports it.
  auto plans = PlanOf({"--worker_num", "4", "--local_worker_num", "2"}, true, 2);
  ASSERT_EQ(plans.size(), 3u);
  EXPECT_EQ(plans[0].env.at("MS_NODE_ID"), "2");
  EXPECT_EQ(plans[1].env.at("RANK_ID"), "3");
  EXPECT_EQ(plans[1].env.at("MS_NODE_RANK"), "-1");
  EXPECT_EQ(plans[2].env.at("RANK_ID"), "0");
  EXPECT_EQ(plans[2].env.count("MS_NODE_RANK"), 0u);
}

TEST_F(MsrunPlan, NoSchedulerWhereItDoesNotRun) {
  auto plans = PlanOf({"--worker_num", "2", "--local_worker_num", "2"}, false);
  ASSERT_EQ(plans.size(), 2u);
  for (const auto& p : plans) EXPECT_GE(p.local_rank, 0);
}

TEST_F(MsrunPlan, SimulationHasNoSchedulerAndNoClusterVariables) {
  auto plans = PlanOf({"--worker_num", "2", "--local_worker_num", "2", "--sim_level", "1"});
  ASSERT_EQ(plans.size(), 2u) << "no scheduler in simulation";
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(i);
    const EnvMap& env = plans[i].env;
    for (const char* absent : {"MS_SCHED_HOST", "MS_SCHED_PORT", "MS_ROLE", "MS_TOPO_TIMEOUT"}) {
      EXPECT_EQ(env.count(absent), 0u) << absent;
    }
    ExpectIn(env, {{"MS_SIMULATION_LEVEL", "1"},
                   {"RANK_SIZE", "2"},
                   {"MS_WORKER_NUM", "2"},
                   {"DEVICE_ID", std::to_string(i)},
                   {"RANK_ID", std::to_string(i)}});
  }
}

TEST_F(MsrunPlan, SimulationWithSimRankIdRunsThatRank) {
  auto plans = PlanOf(
      {"--worker_num", "8", "--local_worker_num", "8", "--sim_level", "0", "--sim_rank_id", "5"});
  ASSERT_EQ(plans.size(), 1u);
  ExpectIn(plans[0].env, {{"RANK_ID", "5"}, {"RANK_SIZE", "8"}, {"MS_SIMULATION_LEVEL", "0"}});
  EXPECT_EQ(plans[0].env.count("MS_ROLE"), 0u);
}

TEST_F(MsrunPlan, SimulationLevelFromTheEnvironmentIsInherited) {
  const EnvMap inherited = {{"MS_SIMULATION_LEVEL", "2"}, {"RANK_ID", "3"}, {"RANK_SIZE", "64"}};
  auto plans = Plan(
      PlannerOf({"--worker_num", "8", "--local_worker_num", "8"}, true, With(kAgentEnv, inherited)),
      Assignment(0));
  ASSERT_EQ(plans.size(), 1u);
  ExpectIn(plans[0].env, inherited);
}

TEST_F(MsrunPlan, BindCoreTrueExportsTheCpuListAndUsesTaskset) {
  auto plans = PlanOf({"--worker_num", "2", "--local_worker_num", "2", "--bind_core", "True"});
  ASSERT_EQ(plans.size(), 3u);
  EXPECT_EQ(plans[0].program, "taskset");
  EXPECT_EQ(plans[0].args, (std::vector<std::string>{"-c", "0-3", "python", "train.py"}));
  EXPECT_EQ(plans[0].env.at("MSRUN_CPU_LIST"), "[0, 1, 2, 3]");
  EXPECT_EQ(plans[1].args, (std::vector<std::string>{"-c", "4-7", "python", "train.py"}));
  EXPECT_EQ(plans[1].env.at("MSRUN_CPU_LIST"), "[4, 5, 6, 7]");
  // msrun binds the scheduler only when the JSON form names it.
  EXPECT_EQ(plans[2].program, "python");
  EXPECT_EQ(plans[2].env.count("MSRUN_CPU_LIST"), 0u);
}

TEST_F(MsrunPlan, BindCoreJsonPinsByPositionWhenTheDeviceMatches) {
  auto plans = PlanOf({"--worker_num", "3", "--local_worker_num", "3", "--bind_core",
                       R"({"device0":["0-1","6-7"],"device5":["2-3"],"scheduler":["4-5"]})"});
  ASSERT_EQ(plans.size(), 4u);
  EXPECT_EQ(plans[0].program, "taskset");
  EXPECT_EQ(plans[0].args, (std::vector<std::string>{"-c", "0-1,6-7", "python", "train.py"}));
  // The second entry is for local worker 1 but names device5: msrun does not bind it.
  EXPECT_EQ(plans[1].program, "python");
  EXPECT_EQ(plans[2].program, "python") << "no third entry";
  EXPECT_EQ(plans[3].name, "scheduler");
  EXPECT_EQ(plans[3].args, (std::vector<std::string>{"-c", "4-5", "python", "train.py"}));
  for (const auto& p : plans) EXPECT_EQ(p.env.count("MSRUN_CPU_LIST"), 0u) << p.name;
}

TEST_F(MsrunPlan, LogFileNames) {
  MsrunPlanner& planner =
      PlannerOf({"--worker_num", "2", "--local_worker_num", "2", "--log_dir", dir_.path()});
  auto plans = Plan(planner, Assignment(0));
  ASSERT_EQ(plans.size(), 3u);
  EXPECT_EQ(plans[0].out.file, dir_ / "worker_0.log");
  EXPECT_EQ(plans[1].out.file, dir_ / "worker_1.log");
  EXPECT_EQ(plans[2].out.file, dir_ / "scheduler.log");
  EXPECT_EQ(planner.LogPath("x.log"), dir_ / "x.log");
  EXPECT_EQ(planner.WorkerLog(Assignment(0), 1), dir_ / "worker_1.log");
  EXPECT_EQ(planner.NodeId(Assignment(0), 1), 1);
}

TEST_F(MsrunPlan, WorkerLogNameBase) {
  // The caller replaces {ip}/{hostname}; the planner uses the base it is given.
  MsrunPlanner& planner = PlannerOf({"--worker_num", "2", "--local_worker_num", "2", "--log_dir",
                                     dir_.path(), "--worker_log_name", "ignored_{ip}"},
                                    true, kAgentEnv, "job_10.0.0.2");
  auto plans = Plan(planner, Assignment(0));
  EXPECT_EQ(plans[0].out.file, dir_ / "job_10.0.0.2_0.log");
  EXPECT_EQ(plans[1].out.file, dir_ / "job_10.0.0.2_1.log");
  EXPECT_EQ(plans[2].out.file, dir_ / "scheduler.log");
}

TEST_F(MsrunPlan, EmptyLogDirMeansRelativeNames) {
  MsrunPlanner& planner = PlannerOf({"--worker_num", "1", "--local_worker_num", "1"});
  auto plans = Plan(planner, Assignment(0));
  ASSERT_EQ(plans.size(), 2u);
  EXPECT_EQ(plans[0].out.file, "worker_0.log");
  EXPECT_EQ(plans[1].out.file, "scheduler.log");
  EXPECT_EQ(planner.LogPath("scheduler.log"), "scheduler.log");
}

TEST_F(MsrunPlan, StdoutAndStderrMergedIntoTheLog) {
  for (const auto& p :
       PlanOf({"--worker_num", "1", "--local_worker_num", "1", "--log_dir", dir_.path()})) {
    SCOPED_TRACE(p.name);
    EXPECT_TRUE(p.err_to_out);
    EXPECT_EQ(p.out.kind, StreamPlan::Kind::kFile) << "--join False: nothing on the console";
  }
}

TEST_F(MsrunPlan, TruncatedOnTheFirstRoundAppendedWithAMarkerLater) {
  MsrunPlanner& planner =
      PlannerOf({"--worker_num", "1", "--local_worker_num", "1", "--log_dir", dir_.path()});
  auto first = Plan(planner, Assignment(0));
  ASSERT_EQ(first.size(), 2u);
  for (const auto& p : first) EXPECT_FALSE(p.out.append) << p.name;
  EXPECT_FALSE(ftrun::testing::FileExists(dir_ / "worker_0.log")) << "the process opens it";

  auto second = Plan(planner, Assignment(0, 1));
  ASSERT_EQ(second.size(), 2u);
  for (const auto& p : second) EXPECT_TRUE(p.out.append) << p.name;
  for (const char* log : {"worker_0.log", "scheduler.log"}) {
    SCOPED_TRACE(log);
    const std::string text = ReadFile(dir_ / log);
    EXPECT_EQ(text.rfind("[ftrun] restart_count=1 ", 0), 0u) << text;
  }
}

TEST_F(MsrunPlan, JoinTrueTeesEveryWorkerToStdoutButNotTheScheduler) {
  MsrunPlanner& planner = PlannerOf(
      {"--worker_num", "2", "--local_worker_num", "2", "--join", "True", "--log_dir", dir_.path()});
  auto plans = Plan(planner, Assignment(0));
  ASSERT_EQ(plans.size(), 3u);
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(plans[i].out.kind, StreamPlan::Kind::kTee);
    EXPECT_EQ(plans[i].out.tee.console_fd, STDOUT_FILENO);
    EXPECT_EQ(plans[i].out.tee.log_file, dir_ / ("worker_" + std::to_string(i) + ".log"));
    EXPECT_EQ(plans[i].out.tee.prefix, "") << "as tail -f shows it";
    EXPECT_FALSE(plans[i].out.tee.append_log);
    EXPECT_TRUE(plans[i].err_to_out);
  }
  EXPECT_EQ(plans[2].out.kind, StreamPlan::Kind::kFile);
  auto again = Plan(planner, Assignment(0, 1));
  EXPECT_TRUE(again[0].out.tee.append_log);
}

TEST_F(MsrunPlan, TailWorkerLogSelectsTheRanksOnTheConsole) {
  auto plans = PlanOf({"--worker_num", "4", "--local_worker_num", "2", "--node_rank", "1", "--join",
                       "True", "--tail_worker_log", "0,3", "--log_dir", dir_.path()},
                      false, 2);
  ASSERT_EQ(plans.size(), 2u);
  EXPECT_EQ(plans[0].out.kind, StreamPlan::Kind::kFile) << "rank 2 is not selected";
  EXPECT_EQ(plans[0].out.file, dir_ / "worker_2.log");
  EXPECT_EQ(plans[1].out.kind, StreamPlan::Kind::kTee) << "rank 3 is";
}

TEST_F(MsrunPlan, TailWorkerLogNeedsJoin) {
  for (const auto& p : PlanOf({"--worker_num", "2", "--local_worker_num", "2", "--join", "False",
                               "--tail_worker_log", "1"})) {
    EXPECT_EQ(p.out.kind, StreamPlan::Kind::kFile) << p.name;
  }
}

TEST_F(MsrunPlan, EntrypointNameAndFailureReport) {
  MsrunPlanner& planner =
      PlannerOf({"--worker_num", "1", "--local_worker_num", "1", "--log_dir", dir_.path()});
  EXPECT_EQ(planner.EntrypointName(), "train.py");
  std::ofstream(dir_ / "scheduler.log") << "a\nb\nERROR: worker 1 lost\nc\n";
  std::ostringstream err;
  planner.ReportFailure({}, err);
  const std::string text = err.str();
  EXPECT_NE(text.find("ERROR: worker 1 lost"), std::string::npos) << text;
  EXPECT_NE(text.find("a\nb\nERROR"), std::string::npos) << "context before the match";
  EXPECT_EQ(text.substr(text.rfind("RuntimeError")),
            "RuntimeError: Distributed job exited with exception. Please check logs in "
            "directory: " +
                dir_.path() + ".\n");
}

}  // namespace
}  // namespace ftrun::launcher
