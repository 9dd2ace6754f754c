// The real ftrun binary with real worker processes (tests/support/fake_worker): success,
// failure and restart, signals, orphans and zombies.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <chrono>
#include <thread>

#include "tests/support/test_support.h"

namespace ftrun::testing {
namespace {

using namespace std::chrono_literals;

class Lifecycle : public ::testing::Test {
 protected:
  // ftrun --log-dir <tmp> <options> --no-python fake_worker <actions>
  std::vector<std::string> Cmd(std::vector<std::string> options,
                               const std::vector<std::string>& actions) {
    std::vector<std::string> argv = {"--log-dir", dir_ / "logs"};
    argv.insert(argv.end(), options.begin(), options.end());
    argv.push_back("--no-python");
    argv.push_back(FakeWorkerBinary());
    argv.insert(argv.end(), actions.begin(), actions.end());
    return argv;
  }
  std::vector<std::string> Stamps() { return Lines(ReadFile(dir_ / "stamps")); }
  // Waits until every rank 0..n-1 wrote its pid file; returns the pids.
  std::vector<pid_t> WorkerPids(int n, const std::string& sub = "") {
    std::vector<pid_t> pids;
    for (int r = 0; r < n; ++r) {
      std::string f = dir_.path() + sub + "/" + std::to_string(r) + ".pid";
      EXPECT_TRUE(WaitFor([&] { return ReadPid(f) > 0; }, 10s)) << f;
      pids.push_back(ReadPid(f));
    }
    return pids;
  }
  TempDir dir_;
};

TEST_F(Lifecycle, AllWorkersSucceed) {
  auto r = RunFtrun(Cmd({"--nproc-per-node", "4"}, {"stamp", dir_ / "stamps"}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Stamps().size(), 4u);
  EXPECT_NE(r.err.find("job finished outcome=succeeded"), std::string::npos) << r.err;
}

TEST_F(Lifecycle, ExitIsSeenAtOnceWhateverTheMonitorInterval) {
  // With a 60 s interval a polling launcher would still be asleep when the timeout hits.
  auto r =
      RunFtrun(Cmd({"--nproc-per-node", "2", "--monitor-interval", "60"}, {"exit", "0"}), {}, 20s);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST_F(Lifecycle, FailureThenRestartCompletes) {
  // Rank 1 fails on attempt 0 only; the restart count is visible to the workers.
  auto r = RunFtrun(Cmd(
      {"--nproc-per-node", "2", "--max-restarts", "2"},
      {"stamp", dir_ / "stamps", "if-attempt", "0", "if-rank", "1", "exit", "3", "sleep", "0.2"}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // Stamps are "<rank> <attempt> <ns>". Rank 0 of attempt 0 may be stopped before it stamps.
  int rank1_attempt0 = 0, attempt1 = 0;
  for (const auto& s : Stamps()) {
    rank1_attempt0 += s.rfind("1 0 ", 0) == 0;
    attempt1 += s.find(" 1 ") == 1;
  }
  EXPECT_EQ(rank1_attempt0, 1) << ReadFile(dir_ / "stamps");
  EXPECT_EQ(attempt1, 2) << ReadFile(dir_ / "stamps");
  EXPECT_NE(r.err.find("Worker group FAILED. 2/2 attempts left"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("failed (exitcode: 3) local_rank: 1"), std::string::npos) << r.err;
}

TEST_F(Lifecycle, RestartsExhaustedReportsRootCause) {
  auto r = RunFtrun(Cmd({"--nproc-per-node", "2", "--max-restarts", "1"},
                        {"stamp", dir_ / "stamps", "if-rank", "1", "exit", "3", "sleep", "30"}));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  int rank1 = 0;  // rank 1 ran (and failed) in both attempts
  for (const auto& s : Stamps()) rank1 += s.rfind("1 ", 0) == 0;
  EXPECT_EQ(rank1, 2) << ReadFile(dir_ / "stamps");
  EXPECT_NE(r.err.find("ChildFailedError"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(FakeWorkerBinary() + " FAILED"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Root Cause (first observed failure):"), std::string::npos);
  EXPECT_NE(r.err.find("  rank      : 1 (local_rank: 1)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("  exitcode  : 3 (pid: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("<NO_OTHER_FAILURES>"), std::string::npos) << r.err;
}

TEST_F(Lifecycle, WorkerKilledBySignal) {
  auto r =
      RunFtrun(Cmd({"--nproc-per-node", "2"}, {"if-rank", "0", "kill-self", "9", "sleep", "30"}));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("  exitcode  : -9 (pid: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Signal 9 (SIGKILL) received by PID"), std::string::npos) << r.err;
}

TEST_F(Lifecycle, ErrorFileTracebackInSummaryAndParentErrorFile) {
  auto r = RunFtrun(Cmd({}, {"error-json", "loss is nan", "exit", "1"}),
                    {{"TORCHELASTIC_ERROR_FILE", dir_ / "agent_error.json"}});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("RuntimeError: loss is nan"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("/attempt_0/0/error.json"), std::string::npos) << r.err;
  std::string parent = ReadFile(dir_ / "agent_error.json");
  EXPECT_NE(parent.find("\"errorCode\":1"), std::string::npos) << parent;
  EXPECT_NE(parent.find("loss is nan"), std::string::npos) << parent;
}

TEST_F(Lifecycle, SigtermIsForwardedAndExitIsOne) {
  ChildRun run(FtrunBinary(), Cmd({"--nproc-per-node", "2"},
                                  {"on-term-exit", "42", "pidfile", dir_.path(), "sleep", "60"}));
  auto pids = WorkerPids(2);
  run.Signal(SIGTERM);
  auto r = run.Wait(20s);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("Received 15 death signal"), std::string::npos) << r.err;
  // Each worker ran its SIGTERM handler (exit 42), so it got SIGTERM, not SIGKILL.
  EXPECT_NE(r.err.find("pid=" + std::to_string(pids[0]) + " attempt=0 status=exit code 42"),
            std::string::npos)
      << r.err;
  for (pid_t p : pids) EXPECT_FALSE(ProcessAlive(p));
}

TEST_F(Lifecycle, OtherForwardedSignals) {
  for (int sig : {SIGINT, SIGHUP, SIGUSR1}) {
    TempDir d;
    ChildRun run(FtrunBinary(), Cmd({}, {"pidfile", d.path(), "sleep", "60"}));
    ASSERT_TRUE(WaitFor([&] { return ReadPid(d / "0.pid") > 0; }, 10s));
    run.Signal(sig);
    auto r = run.Wait(20s);
    EXPECT_EQ(r.exit_code, 1) << sig << r.err;
    EXPECT_NE(r.err.find("Received " + std::to_string(sig) + " death signal"), std::string::npos)
        << r.err;
  }
}

TEST_F(Lifecycle, AStoppedWorkerActsOnTheStopSignalAtOnce) {
  // A stopped process acts on SIGTERM only once it runs again: without the SIGCONT that
  // follows the stop signal, this worker would wait for the whole minute of grace and SIGKILL.
  ChildRun run(FtrunBinary(), Cmd({"--nproc-per-node", "2", "--shutdown-timeout", "60"},
                                  {"on-term-exit", "42", "pidfile", dir_.path(), "sleep", "60"}));
  auto pids = WorkerPids(2);
  ASSERT_EQ(::kill(pids[0], SIGSTOP), 0);
  auto state = [](pid_t p) {  // the state letter in /proc/<pid>/stat ('T': stopped)
    const std::string stat = ReadFile("/proc/" + std::to_string(p) + "/stat");
    const size_t close = stat.rfind(')');
    return close == std::string::npos || close + 2 >= stat.size() ? '?' : stat[close + 2];
  };
  ASSERT_TRUE(WaitFor([&] { return state(pids[0]) == 'T'; }, 10s));
  run.Signal(SIGTERM);
  auto r = run.Wait(40s);
  EXPECT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  // It ran its SIGTERM handler (exit 42): resumed at once, not SIGKILLed after the grace.
  EXPECT_NE(r.err.find("pid=" + std::to_string(pids[0]) + " attempt=0 status=exit code 42"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("sending SIGKILL"), std::string::npos) << r.err;
  for (pid_t p : pids) EXPECT_FALSE(ProcessAlive(p));
}

TEST_F(Lifecycle, TheAgentRaisesItsOpenFileLimitAndWorkersKeepTheOneItWasGiven) {
  struct rlimit given {};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &given), 0);
  if (given.rlim_max < 512) GTEST_SKIP() << "hard limit " << given.rlim_max;
  struct rlimit low = given;
  low.rlim_cur = 256;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);  // what ftrun inherits
  ChildRun run(FtrunBinary(), Cmd({}, {"pidfile", dir_.path(), "sleep", "60"}));
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &given), 0);
  auto pids = WorkerPids(1);
  auto soft = [](pid_t p) {
    struct rlimit rl {};
    return ::prlimit(p, RLIMIT_NOFILE, nullptr, &rl) == 0 ? rl.rlim_cur : 0;
  };
  EXPECT_EQ(soft(run.pid()), given.rlim_max) << "the agent runs with the hard limit";
  EXPECT_EQ(soft(pids[0]), 256u) << "the worker sees what ftrun was started with";
  run.Signal(SIGTERM);
  EXPECT_EQ(run.Wait(20s).exit_code, 1);
}

TEST_F(Lifecycle, WorkerIgnoringSigtermIsKilledAfterGrace) {
  ChildRun run(FtrunBinary(), Cmd({"--nproc-per-node", "2", "--shutdown-timeout", "1"},
                                  {"ignore", "15", "pidfile", dir_.path(), "sleep", "60"}));
  auto pids = WorkerPids(2);
  auto t0 = std::chrono::steady_clock::now();
  run.Signal(SIGTERM);
  auto r = run.Wait(20s);
  auto elapsed = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_GE(elapsed, 900ms);  // the grace period was honoured
  EXPECT_NE(r.err.find("sending SIGKILL"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("status=signal 9 (SIGKILL)"), std::string::npos) << r.err;
  for (pid_t p : pids) EXPECT_FALSE(ProcessAlive(p));
}

TEST_F(Lifecycle, SecondSignalKillsAtOnce) {
  ChildRun run(FtrunBinary(), Cmd({"--shutdown-timeout", "60"},
                                  {"ignore", "15", "pidfile", dir_.path(), "sleep", "60"}));
  WorkerPids(1);
  run.Signal(SIGTERM);
  ASSERT_TRUE(WaitFor([&] { return run.Err().find("death signal") != std::string::npos; }, 10s));
  run.Signal(SIGTERM);
  auto r = run.Wait(20s);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 1) << r.err;
}

TEST_F(Lifecycle, SigkillOfFtrunLeavesNoWorker) {
  ChildRun run(FtrunBinary(), Cmd({"--nproc-per-node", "4"},
                                  {"ignore", "15", "pidfile", dir_.path(), "sleep", "60"}));
  auto pids = WorkerPids(4);
  run.Signal(SIGKILL);
  run.Wait(10s);
  for (pid_t p : pids) {
    EXPECT_TRUE(WaitFor([&] { return !ProcessAlive(p); }, 1s)) << "worker " << p << " survived";
  }
}

TEST_F(Lifecycle, NoZombiesWhileRunning) {
  ChildRun run(FtrunBinary(), Cmd({"--nproc-per-node", "3"}, {"pidfile", dir_.path(), "if-rank",
                                                              "1", "sleep", "60", "exit", "0"}));
  auto pids = WorkerPids(3);
  // Ranks 0 and 2 exit at once; they must be reaped while rank 1 keeps running.
  for (pid_t p : {pids[0], pids[2]}) {
    EXPECT_TRUE(WaitFor([&] { return ProcessState(p) == 0; }, 5s))
        << "pid " << p << " state " << ProcessState(p);
  }
  EXPECT_TRUE(ProcessAlive(pids[1]));
  for (pid_t c : ChildrenOf(run.pid())) EXPECT_NE(ProcessState(c), 'Z') << c;
  run.Signal(SIGTERM);
  EXPECT_EQ(run.Wait(20s).exit_code, 1);
}

TEST_F(Lifecycle, GrandchildrenAreStoppedWithTheirWorker) {
  auto r = RunFtrun(Cmd({"--nproc-per-node", "2"},
                        {"grandchild", dir_.path(), "if-rank", "0", "wait-file", dir_ / "1.gpid",
                         "if-rank", "0", "exit", "1", "sleep", "60"}));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  for (int rank : {0, 1}) {
    pid_t g = ReadPid(dir_ / (std::to_string(rank) + ".gpid"));
    ASSERT_GT(g, 0);
    EXPECT_TRUE(WaitFor([&] { return !ProcessAlive(g); }, 5s)) << "grandchild of rank " << rank;
  }
}

TEST_F(Lifecycle, ProgramThatCannotStart) {
  auto r = RunFtrun({"--no-python", "/nonexistent/train"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("cannot start '/nonexistent/train'"), std::string::npos) << r.err;
  auto q = RunFtrun({"--no-python", "no-such-program-anywhere"});
  EXPECT_EQ(q.exit_code, 1) << q.err;
  EXPECT_NE(q.err.find("not found in PATH"), std::string::npos) << q.err;
}

TEST_F(Lifecycle, UsageErrorsExitTwoWithOneLine) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{}, "training script is missing"},
      {{"--nnodes", "0", "x"}, "--nnodes"},
      {{"--rdzv-conf", "join_timeout", "x"}, "--rdzv-conf"},
      {{"--redirects", "7", "x"}, "--redirects"},
      {{"--frobnicate", "x"}, "--frobnicate"},
      {{"--max-restarts", "-1", "x"}, "--max-restarts"},
  };
  for (const auto& [argv, expect] : cases) {
    auto r = RunFtrun(argv);
    EXPECT_EQ(r.exit_code, 2) << expect;
    auto lines = Lines(r.err);
    ASSERT_EQ(lines.size(), 1u) << r.err;
    EXPECT_EQ(lines[0].rfind("ftrun: error: ", 0), 0u) << lines[0];
    EXPECT_NE(lines[0].find(expect), std::string::npos) << lines[0];
  }
}

TEST_F(Lifecycle, GpuWithoutGpusIsAClearError) {
  if (FileExists("/proc/driver/nvidia/gpus")) GTEST_SKIP() << "this host has NVIDIA GPUs";
  auto r = RunFtrun({"--nproc-per-node", "gpu", "x.py"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--nproc-per-node gpu: no NVIDIA GPU found"), std::string::npos) << r.err;
}

TEST_F(Lifecycle, HelpAndVersion) {
  auto h = RunFtrun({"--help"});
  EXPECT_EQ(h.exit_code, 0);
  EXPECT_NE(h.out.find("--nproc-per-node"), std::string::npos);
  auto v = RunFtrun({"--version"});
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_EQ(v.out.rfind("ftrun ", 0), 0u) << v.out;
}

}  // namespace
}  // namespace ftrun::testing
