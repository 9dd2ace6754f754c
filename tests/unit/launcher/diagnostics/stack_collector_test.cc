// StackCollector and the Python hook with real processes: a script that never imports ftrun
// dumps its stacks into its own file through the sitecustomize hook, the user's own
// sitecustomize still runs, and a process without a handler is left alone (and named).
// eu-stack (ptrace) is run only on children of the collecting process, and one killed at the
// deadline does not leave its target stopped.
#include "launcher/diagnostics/stack_collector.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <fstream>

#include "common/clock.h"
#include "launcher/diagnostics/python_stack_hook.h"
#include "tests/support/test_support.h"

namespace ftrun::testing {
namespace {

using namespace std::chrono_literals;
using launcher::RankDump;
using launcher::StackCollector;

const int kSignal = SIGRTMIN + 2;

void WriteFile(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

class StackCollectorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::mkdir((dir_ / "python").c_str(), 0700), 0);
    ASSERT_EQ(::mkdir((dir_ / "dumps").c_str(), 0700), 0);
    ASSERT_EQ(::mkdir((dir_ / "user").c_str(), 0700), 0);
    ASSERT_TRUE(launcher::WritePythonStackHook(dir_ / "python"));
    // The user's own sitecustomize, hidden by the hook's: it must still run.
    WriteFile(dir_ / "user/sitecustomize.py",
              "import os\nopen(os.environ['USER_SITE_MARK'], 'w').write('ran')\n");
    // A script that never imports ftrun.
    WriteFile(dir_ / "stuck.py",
              "import os, sys, time, sitecustomize\n"
              "def stuck_in_user_code():\n"
              "    print('PYTHONPATH=' + os.environ.get('PYTHONPATH', '<unset>'))\n"
              "    print('HOOK_ON_PATH=' + str(any(p.endswith('/python') for p in sys.path)))\n"
              "    print('ORIGINAL_LEFT=' + str('FTRUN_ORIGINAL_PYTHONPATH' in os.environ))\n"
              "    print('SITECUSTOMIZE=' + sitecustomize.__file__)\n"
              "    print('ready', flush=True)\n"
              "    time.sleep(60)\n"
              "stuck_in_user_code()\n");
  }

  std::map<std::string, std::string> Env() {
    EnvMap agent;
    agent["PYTHONPATH"] = dir_ / "user";
    std::map<std::string, std::string> env;
    for (auto& [k, v] : launcher::PythonStackHookEnv(dir_ / "python", dir_ / "dumps", agent)) {
      env[k] = v;
    }
    env["FTRUN_STACK_SIGNAL"] = std::to_string(kSignal);
    env["USER_SITE_MARK"] = dir_ / "mark";
    return env;
  }

  std::vector<RankDump> Collect(
      std::vector<launcher::StackTarget> targets, std::chrono::milliseconds deadline = 3000ms,
      std::string eu_stack = StackCollector::FindEuStack(CurrentEnvironment())) {
    boost::asio::io_context io;
    auto clock = MakeSteadyClock(io);
    launcher::StackCollectorOptions o;
    o.dump_dir = dir_ / "dumps";
    o.signal = kSignal;
    o.deadline = deadline;
    o.eu_stack = eu_stack;
    o.host = "here";
    StackCollector c(io, *clock, o);
    std::optional<std::vector<RankDump>> got;
    c.Collect(std::move(targets), [&](std::vector<RankDump> d) { got = std::move(d); });
    io.run_for(deadline + 5s);
    EXPECT_TRUE(got) << "no answer by the deadline";
    return got.value_or(std::vector<RankDump>{});
  }

  TempDir dir_;
};

TEST_F(StackCollectorTest, AScriptThatNeverImportsFtrunDumpsIntoItsOwnFile) {
  ChildRun a("python3", {dir_ / "stuck.py"}, Env());
  ChildRun b("python3", {dir_ / "stuck.py"}, Env());
  ASSERT_TRUE(WaitFor([&] { return a.Out().find("ready") != std::string::npos; }, 30s)) << a.Err();
  ASSERT_TRUE(WaitFor([&] { return b.Out().find("ready") != std::string::npos; }, 30s)) << b.Err();
  // The script's view is the one it has without ftrun.
  EXPECT_NE(a.Out().find("PYTHONPATH=" + (dir_ / "user") + "\n"), std::string::npos) << a.Out();
  EXPECT_NE(a.Out().find("HOOK_ON_PATH=False"), std::string::npos) << a.Out();
  EXPECT_NE(a.Out().find("ORIGINAL_LEFT=False"), std::string::npos) << a.Out();
  EXPECT_NE(a.Out().find("SITECUSTOMIZE=" + (dir_ / "user/sitecustomize.py")), std::string::npos)
      << a.Out();
  EXPECT_TRUE(FileExists(dir_ / "mark")) << "the user's sitecustomize did not run";
  ASSERT_TRUE(WaitFor([&] { return StackCollector::CatchesSignal(a.pid(), kSignal); }, 10s));

  ASSERT_FALSE(StackCollector::FindEuStack(CurrentEnvironment()).empty())
      << "eu-stack is required (Debian's elfutils, scripts/install-deps.sh)";
  auto dumps = Collect({{0, a.pid()}, {1, b.pid()}});
  ASSERT_EQ(dumps.size(), 2u);
  for (const auto& d : dumps) {
    EXPECT_EQ(d.note, "") << d.rank;
    EXPECT_NE(d.python.find("(most recent call first)"), std::string::npos) << d.python;
    EXPECT_NE(d.python.find("in stuck_in_user_code"), std::string::npos) << d.python;
    // Native stacks too (eu-stack, installed by scripts/install-deps.sh with elfutils).
    EXPECT_NE(d.native.find("TID "), std::string::npos) << "no native stack: " << d.native;
    // One dump per file: never two interleaved.
    EXPECT_EQ(d.python.find("Current thread"), d.python.rfind("Current thread")) << d.python;
  }
  EXPECT_EQ(a.Err(), "") << "nothing on the console";
  // A second collection truncates the file: again one dump.
  auto again = Collect({{0, a.pid()}});
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].python.find("Current thread"), again[0].python.rfind("Current thread"));
  a.Signal(SIGKILL);
  b.Signal(SIGKILL);
}

TEST_F(StackCollectorTest, AProcessWithoutAHandlerIsNotSignalledAndIsNamed) {
  ChildRun sleeper("sleep", {"60"});
  auto dumps = Collect({{7, sleeper.pid()}}, 500ms);
  ASSERT_EQ(dumps.size(), 1u);
  EXPECT_EQ(dumps[0].python, "");
  EXPECT_NE(dumps[0].note.find("no stack-dump handler"), std::string::npos) << dumps[0].note;
  EXPECT_EQ(::kill(sleeper.pid(), 0), 0) << "the dump signal would have killed it";
  sleeper.Signal(SIGKILL);
}

TEST_F(StackCollectorTest, ARankThatNeverWritesIsReportedAtTheDeadline) {
  ChildRun a("python3", {dir_ / "stuck.py"}, Env());
  ASSERT_TRUE(WaitFor([&] { return a.Out().find("ready") != std::string::npos; }, 30s)) << a.Err();
  ASSERT_TRUE(WaitFor([&] { return StackCollector::CatchesSignal(a.pid(), kSignal); }, 10s));
  a.Signal(SIGSTOP);  // its handler cannot run
  auto dumps = Collect({{3, a.pid()}}, 600ms);
  ASSERT_EQ(dumps.size(), 1u);
  EXPECT_NE(dumps[0].note.find("did not finish writing its stack within 0.6s"), std::string::npos)
      << dumps[0].note;
  a.Signal(SIGKILL);
  a.Signal(SIGCONT);
}

TEST_F(StackCollectorTest, EuStackIsRunOnlyOnAChildOfThisProcess) {
  ASSERT_FALSE(StackCollector::FindEuStack(CurrentEnvironment()).empty())
      << "eu-stack is required (Debian's elfutils, scripts/install-deps.sh)";
  // A grandchild: `sh` starts `sleep` in the background and prints its pid.
  ChildRun parent("sh", {"-c", "sleep 60 & echo $!; wait"});
  ASSERT_TRUE(WaitFor([&] { return parent.Out().find('\n') != std::string::npos; }, 10s));
  const pid_t grandchild = static_cast<pid_t>(std::stol(parent.Out()));
  ChildRun child("sleep", {"60"});
  auto dumps = Collect({{0, grandchild}, {1, child.pid()}}, 3000ms);
  ASSERT_EQ(dumps.size(), 2u);
  EXPECT_EQ(dumps[0].native, "") << "eu-stack ran on a process that is not a child";
  EXPECT_NE(dumps[1].native.find("TID "), std::string::npos) << dumps[1].native;
  ::kill(grandchild, SIGKILL);
  parent.Signal(SIGKILL);
  child.Signal(SIGKILL);
}

TEST_F(StackCollectorTest, AnEuStackKilledAtTheDeadlineLeavesItsTargetRunning) {
  // A stand-in for an eu-stack killed at the deadline right after its PTRACE_ATTACH, before
  // its target took the SIGSTOP the attach queues (the real race): with the tracer gone, the
  // target takes that stop as an ordinary one. The stand-in queues the same SIGSTOP, says so
  // and sleeps until the deadline kills it.
  WriteFile(dir_ / "eu-stack",
            "#!/bin/sh\n"
            "kill -STOP \"$2\" && echo attached\n"
            "exec sleep 60\n");
  ASSERT_EQ(::chmod((dir_ / "eu-stack").c_str(), 0700), 0);
  // Prints a line every 20 ms: whether it runs shows in its output.
  ChildRun ticker("sh", {"-c", "while :; do echo tick; sleep 0.02; done"});
  ASSERT_TRUE(WaitFor([&] { return ticker.Out().find("tick") != std::string::npos; }, 10s));
  auto dumps = Collect({{0, ticker.pid()}}, 1500ms, dir_ / "eu-stack");
  ASSERT_EQ(dumps.size(), 1u);
  ASSERT_NE(dumps[0].native.find("attached"), std::string::npos) << dumps[0].native;
  // The stand-in is dead and reaped (Collect ran the loop until it was); the target ticks on.
  const size_t before = ticker.Out().size();
  EXPECT_TRUE(WaitFor([&] { return ticker.Out().size() >= before + 5 * 5; }, 10s))  // 5 more ticks
      << "the target stays stopped after the killed eu-stack; state "
      << ReadFile("/proc/" + std::to_string(ticker.pid()) + "/stat");
  ticker.Signal(SIGKILL);
}

}  // namespace
}  // namespace ftrun::testing
