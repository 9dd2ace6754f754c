// Issue 17, with real processes: nothing a worker or a local process does stalls the agent or
// outlives the job. A console nobody reads while a worker floods it, a line without end, a
// flood of control connections holding 30,000-deep JSON: a crash is still noticed at once and
// the agent's memory stays bounded. Processes that leave their worker's process group (setsid,
// a double fork) are gone after the job and before the next attempt.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "tests/support/test_support.h"

extern char** environ;

namespace ftrun::testing {
namespace {

using namespace std::chrono_literals;

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// ftrun with its stdout a pipe that nobody reads (the test holds the read end) and its stderr
// a file. Wait() records the agent's largest resident set while it runs.
class UnreadConsoleRun {
 public:
  // `unread`: which of ftrun's descriptors is the pipe nobody reads (the other goes to a
  // file, Err()); `pipe_bytes`: the pipe's capacity (0: the kernel's default, 64 KiB).
  UnreadConsoleRun(const TempDir& dir, const std::vector<std::string>& args,
                   int unread = STDOUT_FILENO, int pipe_bytes = 0)
      : err_path_(dir / "ftrun.err") {
    int fds[2];
    EXPECT_EQ(::pipe2(fds, O_CLOEXEC), 0);
    if (pipe_bytes > 0) {
      EXPECT_GE(::fcntl(fds[1], F_SETPIPE_SZ, pipe_bytes), pipe_bytes);
    }
    read_end_ = fds[0];
    const int err = ::open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], unread);
    posix_spawn_file_actions_adddup2(&actions, err,
                                     unread == STDOUT_FILENO ? STDERR_FILENO : STDOUT_FILENO);
    std::vector<std::string> argv = {FtrunBinary()};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> c_argv;
    for (auto& a : argv) c_argv.push_back(a.data());
    c_argv.push_back(nullptr);
    EXPECT_EQ(::posix_spawn(&pid_, c_argv[0], &actions, nullptr, c_argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&actions);
    ::close(fds[1]);
    ::close(err);
  }
  ~UnreadConsoleRun() {
    if (!exited_) {
      ::kill(pid_, SIGKILL);  // its workers follow (PR_SET_PDEATHSIG)
      ::waitpid(pid_, nullptr, 0);
    }
    ::close(read_end_);
  }
  pid_t pid() const { return pid_; }
  // The exit code, or -1 when it did not exit within `timeout`.
  int Wait(std::chrono::milliseconds timeout) {
    int status = 0;
    WaitFor(
        [&] {
          max_rss_kb_ = std::max(max_rss_kb_, ProcStatusKb(pid_, "VmRSS"));
          exited_ = ::waitpid(pid_, &status, WNOHANG) == pid_;
          return exited_;
        },
        timeout);
    return exited_ && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  long max_rss_kb() const { return max_rss_kb_; }
  int read_end() const { return read_end_; }
  std::string Err() const { return ReadFile(err_path_); }

 private:
  std::string err_path_;
  int read_end_ = -1;
  pid_t pid_ = -1;
  bool exited_ = false;
  long max_rss_kb_ = 0;
};

// Bounded memory: ftrun's own set is about 20 MB here; before the fixes a line without newline
// cost hundreds of MB within seconds.
constexpr long kRssBoundKb = 100 * 1024;

class AgentHardening : public ::testing::Test {
 protected:
  std::vector<std::string> Job(std::vector<std::string> options,
                               const std::vector<std::string>& actions) {
    return FakeWorkerJob({"--log-dir", dir_ / "logs", "--monitor-interval", "0.1"}, options,
                         actions);
  }
  // Pids written by fake_worker's setsid-child / double-fork actions.
  pid_t Stray(const std::string& name) { return ReadPid(dir_ / name); }
  void TearDown() override {
    for (const auto& e : std::filesystem::directory_iterator(dir_.path())) {
      const auto ext = e.path().extension();
      if (ext == ".spid" || ext == ".dpid") {
        if (pid_t p = ReadPid(e.path()); p > 0) ::kill(p, SIGKILL);  // only if the test failed
      }
    }
  }
  TempDir dir_;
};

// The console (ftrun's stdout) is a pipe nobody reads while rank 0 floods it through --tee;
// rank 1 crashes. Before the fix the loop blocked writing the console and the crash was never
// seen.
TEST_F(AgentHardening, UnreadConsoleNeitherDelaysACrashNorGrowsMemory) {
  UnreadConsoleRun run(dir_, Job({"--nproc-per-node", "2", "--tee", "3", "--max-restarts", "0"},
                                 {"if-rank", "0", "flood", "0", "sleep", "2", "exit", "3"}));
  const int code = run.Wait(60s);
  ASSERT_EQ(code, 1) << run.Err();
  EXPECT_NE(run.Err().find("exitcode  : 3"), std::string::npos) << run.Err();
  EXPECT_NE(run.Err().find("console=stdout is not being read"), std::string::npos) << run.Err();
  if (kMemoryIsMeasurable) {
    EXPECT_LT(run.max_rss_kb(), kRssBoundKb);
  }
  std::cout << "agent max VmRSS under an unread console flood: " << run.max_rss_kb() << " kB\n";
}

// ftrun's own log lines (stderr) go to a pipe nobody reads, 4 KiB deep, while the agent
// logs a lot (debug level, a restart every crash): the crashes are still seen and the job
// still ends; the agent drops the lines stderr cannot take instead of waiting for it (before
// the fix, its loop blocked in a log call once the pipe was full, and the job never ended).
// The workers write to their log files (--redirects 3): a worker writing to a console that
// is not read waits for it, under torchrun as under ftrun.
TEST_F(AgentHardening, UnreadStderrNeverStallsTheAgent) {
  UnreadConsoleRun run(dir_,
                       Job({"--nproc-per-node", "2", "--max-restarts", "6", "--log-level", "debug",
                            "--redirects", "3", "--restart-backoff", "0"},
                           {"if-rank", "1", "exit", "3", "sleep", "60"}),
                       STDERR_FILENO, 4096);
  ASSERT_EQ(run.Wait(60s), 1) << "the agent did not finish with its stderr unread";
  std::string unread(1 << 16, '\0');
  const ssize_t n = ::read(run.read_end(), unread.data(), unread.size());
  ASSERT_GT(n, 0);
  unread.resize(static_cast<size_t>(n));
  EXPECT_LE(unread.size(), 4096u) << "no more than the pipe holds was written";
  EXPECT_NE(unread.find("[ftrun:"), std::string::npos) << unread;
}

// A line that never ends, to an unread console: memory stays bounded (it grew to 322 MB).
TEST_F(AgentHardening, EndlessLineCostsBoundedMemory) {
  UnreadConsoleRun run(dir_, Job({"--nproc-per-node", "2", "--tee", "3", "--max-restarts", "0"},
                                 {"if-rank", "0", "flood-line", "0", "sleep", "3", "exit", "3"}));
  ASSERT_EQ(run.Wait(60s), 1) << run.Err();
  if (kMemoryIsMeasurable) {
    EXPECT_LT(run.max_rss_kb(), kRssBoundKb);
  }
  std::cout << "agent max VmRSS with an endless line: " << run.max_rss_kb() << " kB\n";
}

// On a console that is read, a long line is cut into 64 KiB pieces with a marker; the log
// file keeps it whole.
TEST_F(AgentHardening, LongLinesAreCutOnTheConsole) {
  auto r = RunFtrun(Job({"--tee", "1"}, {"flood-line", "150000", "print", "end"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Count(r.out, "[ftrun: line cut at 64 KiB]\n"), 2u);
  EXPECT_EQ(static_cast<size_t>(std::count(r.out.begin(), r.out.end(), 'x')), 150000u);
  EXPECT_NE(r.out.find("[default0]:" + std::string(100, 'x')), std::string::npos);
  EXPECT_NE(r.out.find("xend\n"), std::string::npos);  // the rest of the line, then its end
}

// Processes that left their worker's process group are gone when the job is over.
TEST_F(AgentHardening, StraysDoNotOutliveASuccessfulJob) {
  auto r = RunFtrun(Job({"--nproc-per-node", "2"},
                        {"setsid-child", dir_.path(), "double-fork", dir_.path(), "exit", "0"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* name : {"0.0.spid", "1.0.spid", "0.0.dpid", "1.0.dpid"}) {
    const pid_t p = Stray(name);
    ASSERT_GT(p, 0) << name;
    EXPECT_TRUE(WaitFor([&] { return !ProcessAlive(p); }, 10s)) << name << " pid " << p;
  }
}

// A failed attempt's strays are gone before the next attempt runs, and the exit statuses the
// agent needs are still its own (the restart and the final exit code 0 prove it).
TEST_F(AgentHardening, StraysOfAFailedAttemptGoBeforeTheNextOne) {
  ChildRun run(FtrunBinary(), Job({"--nproc-per-node", "2", "--max-restarts", "1"},
                                  {"setsid-child", dir_.path(), "double-fork", dir_.path(),
                                   // both ranks made theirs before either fails
                                   "if-attempt", "0", "wait-file", dir_ / "0.0.dpid", "if-attempt",
                                   "0", "wait-file", dir_ / "1.0.dpid", "if-attempt", "0", "exit",
                                   "1", "wait-file", dir_ / "release", "exit", "0"}));
  ASSERT_TRUE(WaitFor([&] { return Stray("1.1.dpid") > 0 && Stray("0.1.dpid") > 0; }, 30s))
      << run.Err();
  for (const char* name : {"0.0.spid", "1.0.spid", "0.0.dpid", "1.0.dpid"}) {
    const pid_t p = Stray(name);
    ASSERT_GT(p, 0) << name;
    EXPECT_FALSE(ProcessAlive(p)) << name << " of attempt 0 still runs in attempt 1";
  }
  std::ofstream(dir_ / "release");
  auto r = run.Wait(30s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* name : {"0.1.spid", "1.1.spid", "0.1.dpid", "1.1.dpid"}) {
    const pid_t p = Stray(name);
    EXPECT_TRUE(WaitFor([&] { return !ProcessAlive(p); }, 10s)) << name << " pid " << p;
  }
}

// A local process floods the control socket with connections and 30,000-deep lines (each took
// the parser about 20 s on the loop) while a worker crashes: the crash is still noticed.
TEST_F(AgentHardening, ControlFloodDoesNotDelayACrash) {
  ChildRun run(FtrunBinary(), Job({"--nproc-per-node", "2", "--max-restarts", "0"},
                                  {"env", dir_ / "env", "if-rank", "1", "wait-file", dir_ / "crash",
                                   "if-rank", "1", "exit", "3", "sleep", "300"}));
  // The worker may still be writing its environment file: wait for the variable itself.
  std::string path;
  ASSERT_TRUE(WaitFor(
      [&] {
        if (FileExists(dir_ / "env.1")) path = ParseEnvFile(dir_ / "env.1")["FTRUN_CONTROL_SOCKET"];
        return !path.empty();
      },
      30s))
      << run.Err();
  const std::string deep =
      R"({"type":"hello","x":)" + std::string(30000, '[') + std::string(30000, ']') + "}\n";
  std::vector<int> flood;
  for (int i = 0; i < 300; ++i) {
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd);
      continue;  // the backlog is full for a moment: the flood goes on
    }
    if (i % 2 == 0) (void)::send(fd, deep.data(), deep.size(), MSG_NOSIGNAL);
    flood.push_back(fd);
  }
  std::ofstream(dir_ / "crash");
  const auto crashed = std::chrono::steady_clock::now();
  auto r = run.Wait(60s);
  const auto noticed = std::chrono::steady_clock::now() - crashed;
  for (int fd : flood) ::close(fd);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("exitcode  : 3"), std::string::npos) << r.err;
  EXPECT_LT(noticed, 20s);  // was minutes: 150 lines x about 20 s
  std::cout << "crash to exit under a control flood: "
            << std::chrono::duration_cast<std::chrono::milliseconds>(noticed).count() << " ms\n";
}

}  // namespace
}  // namespace ftrun::testing
