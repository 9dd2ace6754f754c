#include "launcher/cli/torchrun_args.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>
#include <vector>

#include "tests/unit/launcher/cli/launcher_args_checks.h"

namespace ftrun::launcher {
namespace {

using Action = ParsedCommandLine::Action;

// Sets an environment variable for the scope of one test.
class ScopedEnv {
 public:
  ScopedEnv(const char* key, const char* value) : key_(key) { ::setenv(key, value, 1); }
  ~ScopedEnv() { ::unsetenv(key_); }

 private:
  const char* key_;
};

ParsedCommandLine Parse(std::vector<std::string> argv) { return ParseTorchrunArgs(argv); }

TEST(TorchrunArgs, DefaultsMatchTorchrun) {
  auto p = Parse({"train.py"});
  ASSERT_EQ(p.action, Action::kRun) << p.error;
  const TorchrunArgs& a = p.args;
  EXPECT_EQ(a.nnodes, "1:1");
  EXPECT_EQ(a.nproc_per_node, "1");
  EXPECT_EQ(a.rdzv_backend, "static");
  EXPECT_EQ(a.rdzv_endpoint, "");
  EXPECT_EQ(a.rdzv_id, "none");
  EXPECT_EQ(a.max_restarts, 0);
  EXPECT_DOUBLE_EQ(a.monitor_interval, 0.1);
  EXPECT_EQ(a.role, "default");
  EXPECT_EQ(a.master_addr, "127.0.0.1");
  EXPECT_EQ(a.master_port, 29500);
  EXPECT_EQ(a.node_rank, 0);
  EXPECT_EQ(a.redirects, "0");
  EXPECT_EQ(a.tee, "0");
  EXPECT_EQ(a.start_method, "spawn");
  EXPECT_FALSE(a.standalone);
  EXPECT_FALSE(a.module);
  EXPECT_FALSE(a.no_python);
  EXPECT_FALSE(a.run_path);
  EXPECT_EQ(a.script, "train.py");
  EXPECT_TRUE(a.script_args.empty());
}

TEST(TorchrunArgs, BothSpellingsOfEveryMultiWordOption) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"nproc-per-node", "4"},
      {"rdzv-backend", "c10d"},
      {"rdzv-endpoint", "h:1"},
      {"rdzv-id", "job"},
      {"rdzv-conf", "a=b"},
      {"max-restarts", "3"},
      {"monitor-interval", "2"},
      {"start-method", "fork"},
      {"log-dir", "/tmp/x"},
      {"local-ranks-filter", "0"},
      {"node-rank", "1"},
      {"master-addr", "10.0.0.1"},
      {"master-port", "1234"},
      {"local-addr", "a"},
      {"signals-to-handle", "SIGTERM"},
      {"shutdown-timeout", "5"},
      {"log-level", "debug"},
      {"logs-specs", "x"},
      {"event-log-handler", "y"},
      {"numa-binding", "node"},
      {"duplicate-stdout-filters", "a"},
      {"duplicate-stderr-filters", "b"},
  };
  for (const auto& [name, value] : cases) {
    std::string underscored = name;
    for (auto& c : underscored) c = c == '-' ? '_' : c;
    for (const std::string& spelling : {name, underscored}) {
      auto p = Parse({"--" + spelling, value, "train.py"});
      EXPECT_EQ(p.action, Action::kRun) << spelling << ": " << p.error;
      auto q = Parse({"--" + spelling + "=" + value, "train.py"});
      EXPECT_EQ(q.action, Action::kRun) << spelling << "=: " << q.error;
    }
  }
  auto p = Parse({"--nproc_per_node", "4", "--max_restarts=3", "--rdzv_backend", "c10d",
                  "--monitor_interval", "10", "train.py"});
  ASSERT_EQ(p.action, Action::kRun) << p.error;
  EXPECT_EQ(p.args.nproc_per_node, "4");
  EXPECT_EQ(p.args.max_restarts, 3);
  EXPECT_EQ(p.args.rdzv_backend, "c10d");
  EXPECT_DOUBLE_EQ(p.args.monitor_interval, 10);
}

TEST(TorchrunArgs, FlagsAndShortOptions) {
  auto p = Parse({"--standalone", "--no_python", "--run-path", "--virtual-local-rank", "-r", "3",
                  "-t", "0:1,1:2", "-m", "pkg.mod"});
  ASSERT_EQ(p.action, Action::kRun) << p.error;
  EXPECT_TRUE(p.args.standalone);
  EXPECT_TRUE(p.args.no_python);
  EXPECT_TRUE(p.args.run_path);
  EXPECT_TRUE(p.args.virtual_local_rank);
  EXPECT_TRUE(p.args.module);
  EXPECT_EQ(p.args.redirects, "3");
  EXPECT_EQ(p.args.tee, "0:1,1:2");
  EXPECT_EQ(p.args.script, "pkg.mod");
  auto q = Parse({"-r3", "--module", "x"});
  ASSERT_EQ(q.action, Action::kRun) << q.error;
  EXPECT_EQ(q.args.redirects, "3");
  EXPECT_TRUE(q.args.module);
}

TEST(TorchrunArgs, EverythingAfterTheScriptIsPassedThrough) {
  auto p = Parse({"--nproc-per-node", "2", "train.py", "--nproc-per-node", "8", "-m", "--lr", "0.1",
                  "--", "${local_rank}", "--help"});
  ASSERT_EQ(p.action, Action::kRun) << p.error;
  EXPECT_EQ(p.args.nproc_per_node, "2");
  EXPECT_EQ(p.args.script, "train.py");
  EXPECT_EQ(p.args.script_args, (std::vector<std::string>{"--nproc-per-node", "8", "-m", "--lr",
                                                          "0.1", "--", "${local_rank}", "--help"}));
  EXPECT_FALSE(p.args.module);
}

TEST(TorchrunArgs, DoubleDashEndsOptions) {
  ExpectDoubleDashEndsTheOptions(ParseTorchrunArgs, "--max-restarts", "1", &TorchrunArgs::script,
                                 &TorchrunArgs::script_args);
}

TEST(TorchrunArgs, UnambiguousPrefixesAreExpanded) {
  auto p = Parse({"--nproc", "8", "--max_rest", "2", "--monitor=3", "train.py"});
  ASSERT_EQ(p.action, Action::kRun) << p.error;
  EXPECT_EQ(p.args.nproc_per_node, "8");
  EXPECT_EQ(p.args.max_restarts, 2);
  EXPECT_DOUBLE_EQ(p.args.monitor_interval, 3);
}

TEST(TorchrunArgs, AmbiguousPrefixIsAUsageError) {
  auto p = Parse({"--rdzv", "x", "train.py"});
  ASSERT_EQ(p.action, Action::kUsageError);
  EXPECT_NE(p.error.find("ambiguous"), std::string::npos) << p.error;
  EXPECT_NE(p.error.find("--rdzv"), std::string::npos) << p.error;
}

TEST(TorchrunArgs, PetEnvironmentFallbacks) {
  ScopedEnv a("PET_NPROC_PER_NODE", "3");
  ScopedEnv b("PET_MASTER_PORT", "1234");
  ScopedEnv c("PET_STANDALONE", "1");
  ScopedEnv d("PET_RDZV_CONF", "join_timeout=5");
  ScopedEnv e("PET_MAX_RESTARTS", "7");
  auto p = Parse({"train.py"});
  ASSERT_EQ(p.action, Action::kRun) << p.error;
  EXPECT_EQ(p.args.nproc_per_node, "3");
  EXPECT_EQ(p.args.master_port, 1234);
  EXPECT_TRUE(p.args.standalone);
  EXPECT_EQ(p.args.rdzv_conf, "join_timeout=5");
  EXPECT_EQ(p.args.max_restarts, 7);
  // The command line beats the environment.
  auto q = Parse({"--nproc-per-node", "5", "train.py"});
  EXPECT_EQ(q.args.nproc_per_node, "5");
}

TEST(TorchrunArgs, BadPetValueNamesTheOption) {
  ScopedEnv a("PET_MAX_RESTARTS", "many");
  auto p = Parse({"train.py"});
  ASSERT_EQ(p.action, Action::kUsageError);
  EXPECT_NE(p.error.find("max"), std::string::npos) << p.error;
}

TEST(TorchrunArgs, UsageErrorsNameTheOption) {
  struct Case {
    std::vector<std::string> argv;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {{}, "training script is missing"},
      {{"--nproc-per-node", "2"}, "training script is missing"},
      {{"--bogus", "train.py"}, "--bogus"},
      {{"-x", "train.py"}, "-x"},
      {{"--max-restarts", "abc", "train.py"}, "max-restarts"},
      {{"--monitor-interval", "fast", "train.py"}, "monitor-interval"},
      {{"--master-port", "http", "train.py"}, "master-port"},
      {{"--start-method", "thread", "train.py"}, "start-method"},
      {{"--numa-binding", "bogus", "train.py"}, "numa-binding"},
      {{"--node-rank"}, "node-rank"},
  };
  for (const auto& c : cases) {
    auto p = Parse(c.argv);
    EXPECT_EQ(p.action, Action::kUsageError) << c.expect;
    EXPECT_NE(p.error.find(c.expect), std::string::npos)
        << "expected '" << c.expect << "' in: " << p.error;
    EXPECT_EQ(p.error.find('\n'), std::string::npos) << "one line: " << p.error;
  }
}

TEST(TorchrunArgs, HelpAndVersion) {
  EXPECT_EQ(Parse({"--help"}).action, Action::kPrintedHelp);
  EXPECT_EQ(Parse({"-h"}).action, Action::kPrintedHelp);
  EXPECT_EQ(Parse({"--version"}).action, Action::kPrintedVersion);
  std::string help = TorchrunHelp();
  for (const char* opt : {"--nnodes", "--nproc-per-node", "--rdzv-conf", "--tee", "--standalone",
                          "--signals-to-handle", "--shutdown-timeout", "--local-ranks-filter"}) {
    EXPECT_NE(help.find(opt), std::string::npos) << opt;
  }
  EXPECT_NE(help.find("(0: off) [default: 1]\n"), std::string::npos) << "stated once";
  EXPECT_EQ(help.find("] [default:"), std::string::npos) << help;
}

}  // namespace
}  // namespace ftrun::launcher
