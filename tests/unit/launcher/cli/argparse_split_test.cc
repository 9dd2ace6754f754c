// The launcher command lines read as argparse reads them (launcher/cli/argparse_split.h):
// the script's words untouched whatever stands before it, empty values, abbreviations and
// argparse's errors; and `ftrun torch.distributed.launch`'s --use-env. tests/corpus checks
// the same against torch's own parser on real launch lines.
#include <gtest/gtest.h>
#include <stdlib.h>

#include "launcher/cli/torchrun_args.h"

namespace ftrun::launcher {
namespace {

using Action = ParsedCommandLine::Action;

TEST(ArgparseSplit, TheScriptsWordsAreNeverRewrittenAfterAFlag) {
  const std::vector<std::string> script = {"train.py",  "--local-rank=${local_rank}",
                                           "--metrics", "acc",
                                           "--max",     "3",
                                           "--run",     "r1",
                                           "--log",     "--network",
                                           "--master",  "--nproc",
                                           "-m",        "--",
                                           "x"};
  for (const char* flag : {"--standalone", "--dry-run", "--no-python", "--virtual-local-rank", "-m",
                           "--run-path", "--network-check"}) {
    std::vector<std::string> argv = {flag};
    argv.insert(argv.end(), script.begin(), script.end());
    auto p = ParseTorchrunArgs(argv);
    ASSERT_EQ(p.action, Action::kRun) << flag << ": " << p.error;
    EXPECT_EQ(p.args.script, "train.py") << flag;
    EXPECT_EQ(p.args.script_args, std::vector<std::string>(script.begin() + 1, script.end()))
        << flag;
  }
}

TEST(ArgparseSplit, AbbreviationsWorkAfterAFlag) {
  auto p = ParseTorchrunArgs({"--standalone", "--nproc", "2", "--max_r=4", "train.py"});
  ASSERT_EQ(p.action, Action::kRun) << p.error;
  EXPECT_TRUE(p.args.standalone);
  EXPECT_EQ(p.args.nproc_per_node, "2");
  EXPECT_EQ(p.args.max_restarts, 4);
}

TEST(ArgparseSplit, AnEmptyValueIsAValue) {
  auto p = ParseTorchrunArgs({"--rdzv_id=", "--nnodes=2", "--rdzv_endpoint", "", "train.py"});
  ASSERT_EQ(p.action, Action::kRun) << p.error;
  EXPECT_EQ(p.args.rdzv_id, "");
  EXPECT_EQ(p.args.nnodes, "2");
  EXPECT_EQ(p.args.rdzv_endpoint, "");
  EXPECT_EQ(p.args.script, "train.py");
  auto n = ParseTorchrunArgs({"--max_restarts=", "train.py"});
  ASSERT_EQ(n.action, Action::kUsageError);
  EXPECT_EQ(n.error, "--max-restarts: '' is not an integer");
}

TEST(ArgparseSplit, ArgparsesErrors) {
  EXPECT_EQ(ParseTorchrunArgs({"--rdzv", "x", "t.py"}).error,
            "ambiguous option: --rdzv could match --rdzv-backend, --rdzv-endpoint, --rdzv-id, "
            "--rdzv-conf");
  EXPECT_EQ(ParseTorchrunArgs({"--master_addr", "--nnodes", "2", "t.py"}).error,
            "argument --master_addr: expected one argument");
  EXPECT_EQ(ParseTorchrunArgs({"--standalone=1", "t.py"}).error,
            "argument --standalone: ignored explicit argument '1'");
  EXPECT_EQ(ParseTorchrunArgs({"--bogus", "t.py"}).error,
            "unrecognized option '--bogus' (see ftrun --help)");
  EXPECT_EQ(ParseDlroverRunArgs({"--bogus", "t.py"}).error,
            "unrecognized option '--bogus' (see dlrover-run --help)");
}

TEST(ArgparseSplit, TorchrunsOwnOptionWinsOverAnExtension) {
  // --event: torchrun's --event-log-handler, not ambiguous with ftrun's --event-log.
  auto p = ParseTorchrunArgs({"--event", "x", "t.py"});
  ASSERT_EQ(p.action, Action::kRun) << p.error;
  EXPECT_EQ(p.args.event_log_handler, "x");
  EXPECT_EQ(p.args.event_log, "");
}

TEST(ArgparseSplit, CombinedShortFlagsAndNegativeNumbers) {
  auto p = ParseTorchrunArgs({"-mr3", "pkg.train", "-1"});
  ASSERT_EQ(p.action, Action::kRun) << p.error;
  EXPECT_TRUE(p.args.module);
  EXPECT_EQ(p.args.redirects, "3");
  EXPECT_EQ(p.args.script_args, std::vector<std::string>{"-1"});
}

TEST(ArgparseSplit, AShortFlagWithAnUnknownShortAttachedIsArgparsesError) {
  auto p = ParseTorchrunArgs({"-m3", "pkg.train"});
  ASSERT_EQ(p.action, Action::kUsageError);
  EXPECT_EQ(p.error, "argument -m: ignored explicit argument '3'");
}

// argparse's type=int and type=float are Python's int() and float(): whitespace (a PET_*
// variable written by a YAML block scalar ends in a newline), a sign, underscores; nothing
// C's conversions take beyond them (hexadecimal).
TEST(ArgparseSplit, NumbersAsPythonReadsThem) {
  ::setenv("PET_MAX_RESTARTS", "3\n", 1);
  auto p = ParseTorchrunArgs({"--monitor_interval", " 1_0.5 ", "--node_rank=+1", "t.py"});
  ::unsetenv("PET_MAX_RESTARTS");
  ASSERT_EQ(p.action, Action::kRun) << p.error;
  EXPECT_EQ(p.args.max_restarts, 3);
  EXPECT_EQ(p.args.monitor_interval, 10.5);
  EXPECT_EQ(p.args.node_rank, 1);
  EXPECT_EQ(ParseTorchrunArgs({"--monitor_interval", "0x1p-2", "t.py"}).error,
            "--monitor-interval: '0x1p-2' is not a number");
  EXPECT_EQ(ParseTorchrunArgs({"--max_restarts", "0x10", "t.py"}).error,
            "--max-restarts: '0x10' is not an integer");
  EXPECT_EQ(ParseTorchrunArgs({"--max_restarts", "99999999999", "t.py"}).error,
            "--max-restarts: '99999999999' is out of range");
}

// torchrun's check_env: bool(int(PET_<FLAG>)).
TEST(ArgparseSplit, APetFlagIsTrueForAnyNonZeroInteger) {
  for (const char* on : {"1", "-1", " 2\n", "+1_0"}) {
    ::setenv("PET_NO_PYTHON", on, 1);
    auto p = ParseTorchrunArgs({"t"});
    ASSERT_EQ(p.action, Action::kRun) << on << ": " << p.error;
    EXPECT_TRUE(p.args.no_python) << on;
  }
  for (const char* off : {"0", " -0 ", "0_0"}) {
    ::setenv("PET_NO_PYTHON", off, 1);
    auto p = ParseTorchrunArgs({"t"});
    ASSERT_EQ(p.action, Action::kRun) << off << ": " << p.error;
    EXPECT_FALSE(p.args.no_python) << off;
  }
  ::setenv("PET_NO_PYTHON", "true", 1);
  EXPECT_EQ(ParseTorchrunArgs({"t"}).error,
            "PET_NO_PYTHON (read for --no-python): 'true' is not a valid value (expected an "
            "integer: 0 is off, any other is on)");
  ::setenv("PET_NO_PYTHON", "0", 1);
  EXPECT_TRUE(ParseTorchrunArgs({"--no-python", "t"}).args.no_python) << "the command line wins";
  ::unsetenv("PET_NO_PYTHON");
}

TEST(ArgparseSplit, BadPetValuesNameTheVariable) {
  ::setenv("PET_MAX_RESTARTS", "many", 1);
  auto p = ParseTorchrunArgs({"t.py"});
  ::unsetenv("PET_MAX_RESTARTS");
  EXPECT_EQ(p.error, "PET_MAX_RESTARTS (read for --max-restarts): 'many' is not an integer");
  ::setenv("PET_STANDALONE", "yes please", 1);
  auto f = ParseTorchrunArgs({"t.py"});
  ::unsetenv("PET_STANDALONE");
  EXPECT_EQ(f.error.rfind("PET_STANDALONE (read for --standalone): ", 0), 0u) << f.error;
  EXPECT_EQ(f.error.find("Could not convert"), std::string::npos) << f.error;
  // On the command line the option is named.
  EXPECT_EQ(ParseTorchrunArgs({"--node_rank=abc", "t.py"}).error,
            "--node-rank: 'abc' is not an integer");
}

// An empty PET_* variable (`export PET_MASTER_ADDR=$HEAD` with HEAD unset) is the empty value,
// as torchrun's os.environ.get reads it, not "unset": checked like --opt= and blamed on the
// variable. The command line still wins over it.
TEST(ArgparseSplit, AnEmptyPetVariableIsAnEmptyValue) {
  ::setenv("PET_MASTER_ADDR", "", 1);
  auto p = ParseTorchrunArgs({"t.py"});
  ASSERT_EQ(p.action, Action::kRun) << p.error;
  EXPECT_EQ(p.args.master_addr, "");
  EXPECT_EQ(p.Blame("--master-addr: must not be empty"),
            "PET_MASTER_ADDR (read for --master-addr): must not be empty");
  auto q = ParseTorchrunArgs({"--master-addr", "10.0.0.1", "t.py"});
  ::unsetenv("PET_MASTER_ADDR");
  ASSERT_EQ(q.action, Action::kRun) << q.error;
  EXPECT_EQ(q.args.master_addr, "10.0.0.1");
  ::setenv("PET_MAX_RESTARTS", "", 1);
  EXPECT_EQ(ParseTorchrunArgs({"t.py"}).error,
            "PET_MAX_RESTARTS (read for --max-restarts): '' is not an integer");
  ::unsetenv("PET_MAX_RESTARTS");
  ::setenv("PET_STANDALONE", "", 1);
  EXPECT_EQ(ParseTorchrunArgs({"t.py"}).error,
            "PET_STANDALONE (read for --standalone): '' is not a valid value (expected an "
            "integer: 0 is off, any other is on)");
  ::unsetenv("PET_STANDALONE");
  ::setenv("PET_RDZV_ENDPOINT", "", 1);  // empty is torch's default: fine
  auto e = ParseTorchrunArgs({"t.py"});
  ::unsetenv("PET_RDZV_ENDPOINT");
  ASSERT_EQ(e.action, Action::kRun) << e.error;
  EXPECT_EQ(e.args.rdzv_endpoint, "");
}

// A value that parses but is then refused (range, backend name) names the variable too.
TEST(ArgparseSplit, PetValuesRefusedAfterParsingNameTheVariable) {
  ::setenv("PET_NODE_RANK", "-1", 1);
  auto p = ParseTorchrunArgs({"t.py"});
  ::unsetenv("PET_NODE_RANK");
  ASSERT_EQ(p.action, Action::kRun) << p.error;
  EXPECT_EQ(p.Blame("--node-rank: must be >= 0, got -1"),
            "PET_NODE_RANK (read for --node-rank): must be >= 0, got -1");
  EXPECT_EQ(p.Blame("--nnodes: must be >= 1"), "--nnodes: must be >= 1");  // not from PET_
  // About the option but not its value: left alone.
  EXPECT_EQ(p.Blame("--node-rank: NODE_RANK is 11"), "--node-rank: NODE_RANK is 11");
  auto q = ParseTorchrunArgs({"--node-rank", "-1", "t.py"});
  EXPECT_EQ(q.Blame("--node-rank: must be >= 0, got -1"), "--node-rank: must be >= 0, got -1");
}

TEST(ArgparseSplit, DistributedLaunchUseEnv) {
  auto p = ParseDistributedLaunchArgs({"--nproc_per_node=2", "--use_env", "main.py", "--x"});
  ASSERT_EQ(p.action, Action::kRun) << p.error;
  EXPECT_TRUE(p.args.use_env);
  EXPECT_EQ(p.args.script_args, std::vector<std::string>{"--x"});
  auto q = ParseDistributedLaunchArgs({"--use-env", "main.py"});
  EXPECT_TRUE(q.args.use_env);
  EXPECT_FALSE(ParseDistributedLaunchArgs({"main.py"}).args.use_env);
  // torchrun itself has no --use-env.
  EXPECT_EQ(ParseTorchrunArgs({"--use_env", "main.py"}).action, Action::kUsageError);
}

}  // namespace
}  // namespace ftrun::launcher
