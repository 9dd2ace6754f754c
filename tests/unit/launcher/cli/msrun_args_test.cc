#include "launcher/cli/msrun_args.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tests/unit/launcher/cli/launcher_args_checks.h"

namespace ftrun::launcher {
namespace {

using Action = ParsedMsrun::Action;

ParsedMsrun Parse(std::vector<std::string> argv) { return ParseMsrunArgs(argv); }

// Parses `argv` + train.py and expects a run.
MsrunArgs Args(std::vector<std::string> argv) {
  argv.push_back("train.py");
  auto p = Parse(argv);
  EXPECT_EQ(p.action, Action::kRun) << p.error;
  EXPECT_EQ(p.args.task_script, "train.py");
  return p.args;
}

std::string ErrorOf(std::vector<std::string> argv) {
  auto p = Parse(std::move(argv));
  EXPECT_EQ(p.action, Action::kUsageError);
  return p.error;
}

TEST(MsrunArgs, DefaultsMatchMsrun) {
  const MsrunArgs a = Args({});
  EXPECT_EQ(a.worker_num, 8);
  EXPECT_EQ(a.local_worker_num, 8);
  EXPECT_EQ(a.master_addr, "127.0.0.1");
  EXPECT_EQ(a.master_port, 8118);
  EXPECT_EQ(a.node_rank, -1);
  EXPECT_EQ(a.log_dir, "");
  EXPECT_EQ(a.join, "False");
  EXPECT_EQ(a.cluster_time_out, 600);
  EXPECT_EQ(a.bind_core, "False");
  EXPECT_EQ(a.sim_level, -1);
  EXPECT_EQ(a.sim_rank_id, -1);
  EXPECT_EQ(a.rank_table_file, "");
  EXPECT_EQ(a.worker_log_name, "");
  EXPECT_EQ(a.tail_worker_log, "-1");
  EXPECT_TRUE(a.task_script_args.empty());
}

TEST(MsrunArgs, ExtensionDefaults) {
  const MsrunArgs a = Args({});
  EXPECT_EQ(a.max_restarts, 0);
  EXPECT_DOUBLE_EQ(a.monitor_interval, 0.1);
  EXPECT_FALSE(a.shutdown_timeout.has_value());
  EXPECT_EQ(a.fault_save, "on");
  EXPECT_FALSE(a.save_timeout.has_value());
  EXPECT_DOUBLE_EQ(a.hang_timeout, 0);
  EXPECT_FALSE(a.rdzv_port.has_value());
  EXPECT_EQ(a.rdzv_conf, "");
  EXPECT_EQ(a.local_addr, "");
  EXPECT_EQ(a.event_log, "");
  EXPECT_FALSE(a.metrics_port.has_value());
  EXPECT_EQ(a.log_level, "");
  EXPECT_FALSE(a.dry_run);
}

// A field of MsrunArgs as text, for comparing with the value given on the command line:
// numbers through std::to_string, an absent optional as "-".
std::string Text(const std::string& v) { return v; }
std::string Text(int v) { return std::to_string(v); }
std::string Text(double v) { return std::to_string(v); }
template <class T>
std::string Text(const std::optional<T>& v) {
  return v ? Text(*v) : "-";
}

// One option, its value as text, and how to read it back.
struct OptionCase {
  std::string name;
  std::string value;
  std::function<std::string(const MsrunArgs&)> get;
};

// The getter of an OptionCase: `field` (of MsrunArgs or a base of it) as Text.
template <class T, class Base>
std::function<std::string(const MsrunArgs&)> Field(T Base::*field) {
  return [field](const MsrunArgs& a) { return Text(a.*field); };
}

const std::vector<OptionCase>& MsrunOptions() {
  static const std::vector<OptionCase> cases = {
      {"worker_num", "16", Field(&MsrunArgs::worker_num)},
      {"local_worker_num", "4", Field(&MsrunArgs::local_worker_num)},
      {"master_addr", "10.0.0.7", Field(&MsrunArgs::master_addr)},
      {"master_port", "9123", Field(&MsrunArgs::master_port)},
      {"node_rank", "3", Field(&MsrunArgs::node_rank)},
      {"log_dir", "/tmp/ms_logs", Field(&MsrunArgs::log_dir)},
      {"join", "True", Field(&MsrunArgs::join)},
      {"cluster_time_out", "-1", Field(&MsrunArgs::cluster_time_out)},
      {"bind_core", "{\"device0\":[\"0-3\"]}", Field(&MsrunArgs::bind_core)},
      {"sim_level", "2", Field(&MsrunArgs::sim_level)},
      {"sim_rank_id", "5", Field(&MsrunArgs::sim_rank_id)},
      {"rank_table_file", "/etc/hccl.json", Field(&MsrunArgs::rank_table_file)},
      {"worker_log_name", "w_{ip}", Field(&MsrunArgs::worker_log_name)},
      {"tail_worker_log", "0,2", Field(&MsrunArgs::tail_worker_log)},
  };
  return cases;
}

TEST(MsrunArgs, EveryMsrunOptionWithSpaceAndEquals) {
  for (const auto& c : MsrunOptions()) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(c.get(Args({"--" + c.name, c.value})), c.value);
    EXPECT_EQ(c.get(Args({"--" + c.name + "=" + c.value})), c.value);
  }
}

TEST(MsrunArgs, MsrunOptionsHaveNoDashedSpelling) {
  EXPECT_NE(ErrorOf({"--worker-num", "2", "train.py"}).find("--worker-num"), std::string::npos);
  EXPECT_NE(ErrorOf({"--log-dir", "x", "train.py"}).find("--log-dir"), std::string::npos);
}

TEST(MsrunArgs, NegativeNumbersAreValues) {
  EXPECT_EQ(Args({"--node_rank", "-1"}).node_rank, -1);
  EXPECT_EQ(Args({"--cluster_time_out", "-5"}).cluster_time_out, -5);
}

TEST(MsrunArgs, LastValueWins) {
  EXPECT_EQ(Args({"--worker_num", "2", "--worker_num", "4"}).worker_num, 4);
}

TEST(MsrunArgs, EveryExtensionInBothSpellings) {
  const std::vector<OptionCase> cases = {
      {"max_restarts", "3", Field(&MsrunArgs::max_restarts)},
      {"monitor_interval", "2.5", Field(&MsrunArgs::monitor_interval)},
      {"shutdown_timeout", "7", Field(&MsrunArgs::shutdown_timeout)},
      {"fault_save", "off", Field(&MsrunArgs::fault_save)},
      {"save_timeout", "12.5", Field(&MsrunArgs::save_timeout)},
      {"hang_timeout", "60", Field(&MsrunArgs::hang_timeout)},
      {"rdzv_port", "9000", Field(&MsrunArgs::rdzv_port)},
      {"rdzv_conf", "join_timeout=5", Field(&MsrunArgs::rdzv_conf)},
      {"local_addr", "10.1.1.1", Field(&MsrunArgs::local_addr)},
      {"event_log", "/tmp/events.jsonl", Field(&MsrunArgs::event_log)},
      {"metrics_port", "9400", Field(&MsrunArgs::metrics_port)},
      {"log_level", "debug", Field(&MsrunArgs::log_level)},
  };
  for (const auto& c : cases) {
    std::string dashed = c.name;
    std::replace(dashed.begin(), dashed.end(), '_', '-');
    // The expected value as the getter prints it (doubles through std::to_string).
    const std::string expected = c.get(Args({"--" + c.name, c.value}));
    SCOPED_TRACE(c.name);
    EXPECT_NE(expected, c.get(Args({})));
    EXPECT_EQ(c.get(Args({"--" + dashed, c.value})), expected);
    EXPECT_EQ(c.get(Args({"--" + dashed + "=" + c.value})), expected);
    EXPECT_EQ(c.get(Args({"--" + c.name + "=" + c.value})), expected);
  }
  EXPECT_EQ(Args({"--max_restarts", "3"}).max_restarts, 3);
  EXPECT_DOUBLE_EQ(Args({"--monitor-interval", "2.5"}).monitor_interval, 2.5);
  EXPECT_DOUBLE_EQ(*Args({"--save-timeout", "12.5"}).save_timeout, 12.5);
  EXPECT_TRUE(Args({"--dry_run"}).dry_run);
  EXPECT_TRUE(Args({"--dry-run"}).dry_run);
}

TEST(MsrunArgs, ExtensionValuesAreChecked) {
  EXPECT_NE(ErrorOf({"--fault_save", "maybe", "train.py"}).find("maybe"), std::string::npos);
  EXPECT_EQ(Parse({"--max_restarts", "x", "train.py"}).action, Action::kUsageError);
  EXPECT_EQ(Parse({"--worker_num", "eight", "train.py"}).action, Action::kUsageError);
}

TEST(MsrunArgs, UnambiguousPrefixesAsArgparse) {
  EXPECT_EQ(Args({"--local_w", "2"}).local_worker_num, 2);
  EXPECT_EQ(Args({"--local_w=3"}).local_worker_num, 3);
  EXPECT_EQ(Args({"--worker_n", "4"}).worker_num, 4);
  EXPECT_EQ(Args({"--master_p", "1234"}).master_port, 1234);
  EXPECT_EQ(Args({"--clu", "5"}).cluster_time_out, 5);
  EXPECT_EQ(Args({"--max_r", "2"}).max_restarts, 2);
  EXPECT_EQ(Args({"--max-r", "2"}).max_restarts, 2);
  EXPECT_TRUE(Args({"--dry"}).dry_run);  // --dry_run and --dry-run are one option
}

TEST(MsrunArgs, AmbiguousPrefixIsAnError) {
  const std::string e = ErrorOf({"--worker", "4", "train.py"});
  EXPECT_NE(e.find("ambiguous option: --worker could match"), std::string::npos) << e;
  EXPECT_NE(e.find("--worker_num"), std::string::npos) << e;
  EXPECT_NE(e.find("--worker_log_name"), std::string::npos) << e;
  EXPECT_NE(ErrorOf({"--master", "x", "train.py"}).find("ambiguous"), std::string::npos);
  EXPECT_NE(ErrorOf({"--sim", "1", "train.py"}).find("ambiguous"), std::string::npos);
}

TEST(MsrunArgs, MsrunOptionWinsAPrefixTieWithAnExtension) {
  // --log_dir, and the extension --log_level/--log-level: msrun's own option wins.
  MsrunArgs a = Args({"--log", "/tmp/logs"});
  EXPECT_EQ(a.log_dir, "/tmp/logs");
  EXPECT_EQ(a.log_level, "");
  EXPECT_EQ(Args({"--log=/tmp/l2"}).log_dir, "/tmp/l2");
  // --rank_table_file against --rdzv_port/--rdzv_conf.
  EXPECT_EQ(Args({"--r", "/etc/rt.json"}).rank_table_file, "/etc/rt.json");
  // --local_worker_num against --local_addr/--local-addr.
  EXPECT_EQ(Args({"--local", "2"}).local_worker_num, 2);
  // The extension is still reachable by a prefix that only it has.
  EXPECT_EQ(Args({"--log_l", "debug"}).log_level, "debug");
  EXPECT_EQ(Args({"--rdzv_p", "7000"}).rdzv_port, 7000);
}

TEST(MsrunArgs, EverythingAfterTheScriptGoesToTheScript) {
  auto p = Parse({"--worker_num", "2", "train.py", "--worker_num", "3", "--foo", "-x", "bar"});
  ASSERT_EQ(p.action, Action::kRun) << p.error;
  EXPECT_EQ(p.args.worker_num, 2);
  EXPECT_EQ(p.args.task_script, "train.py");
  EXPECT_EQ(p.args.task_script_args,
            (std::vector<std::string>{"--worker_num", "3", "--foo", "-x", "bar"}));
}

TEST(MsrunArgs, PrefixesAreNotExpandedInTheScriptArguments) {
  auto p = Parse({"train.py", "--log", "x", "--worker", "1"});
  ASSERT_EQ(p.action, Action::kRun) << p.error;
  EXPECT_EQ(p.args.task_script_args, (std::vector<std::string>{"--log", "x", "--worker", "1"}));
  EXPECT_EQ(p.args.log_dir, "");
}

TEST(MsrunArgs, DoubleDashEndsTheOptions) {
  ExpectDoubleDashEndsTheOptions(ParseMsrunArgs, "--worker_num", "2", &MsrunArgs::task_script,
                                 &MsrunArgs::task_script_args);
}

TEST(MsrunArgs, MissingScript) {
  EXPECT_NE(ErrorOf({}).find("task script is missing"), std::string::npos);
  EXPECT_NE(ErrorOf({"--worker_num", "2"}).find("task script is missing"), std::string::npos);
}

TEST(MsrunArgs, UnknownOption) {
  const std::string e = ErrorOf({"--foo", "1", "train.py"});
  EXPECT_NE(e.find("unrecognized option '--foo'"), std::string::npos) << e;
  EXPECT_NE(ErrorOf({"--worker_num", "2", "--bogus=3", "train.py"}).find("--bogus"),
            std::string::npos);
}

TEST(MsrunArgs, SimLevelOutsideZeroToThree) {
  for (const char* bad : {"4", "-1", "-2", "10"}) {
    SCOPED_TRACE(bad);
    const std::string e = ErrorOf({"--sim_level", bad, "train.py"});
    EXPECT_NE(e.find("--sim_level"), std::string::npos) << e;
  }
  for (int ok = 0; ok <= 3; ++ok) {
    EXPECT_EQ(Args({"--sim_level", std::to_string(ok)}).sim_level, ok);
  }
}

TEST(MsrunArgs, HelpAndVersion) {
  ::testing::internal::CaptureStdout();
  auto p = Parse({"--help"});
  std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(p.action, Action::kPrintedHelp);
  EXPECT_NE(out.find("--worker_num"), std::string::npos) << out;
  EXPECT_NE(out.find("--max_restarts"), std::string::npos) << out;
  EXPECT_NE(out.find("usage: msrun"), std::string::npos) << out;

  ::testing::internal::CaptureStdout();
  EXPECT_EQ(Parse({"-h"}).action, Action::kPrintedHelp);
  ::testing::internal::GetCapturedStdout();

  ::testing::internal::CaptureStdout();
  EXPECT_EQ(Parse({"--version"}).action, Action::kPrintedVersion);
  out = ::testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("(msrun)"), std::string::npos) << out;

  EXPECT_NE(MsrunHelp().find("--tail_worker_log"), std::string::npos);
}

}  // namespace
}  // namespace ftrun::launcher
