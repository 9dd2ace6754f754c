// WorkerProcess::Spawn: its fork is announced to no io_context (before, the loop's resolver
// service joined the thread of an in-flight getaddrinfo at every spawn, and the child
// re-registered the loop's descriptors); the child starts with its own process group, an
// empty signal mask, default SIGPIPE and only fds 0-2; a program that cannot be executed is
// an error naming it, and leaves no child behind.
#include "launcher/workers/worker_process.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <cerrno>
#include <chrono>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "tests/support/test_support.h"

namespace ftrun::launcher {
namespace {

// Counts the fork events its io_context is told about.
class ForkWitness : public boost::asio::execution_context::service {
 public:
  using key_type = ForkWitness;
  static inline boost::asio::execution_context::id id;
  explicit ForkWitness(boost::asio::execution_context& ctx)
      : boost::asio::execution_context::service(ctx) {}
  void notify_fork(boost::asio::execution_context::fork_event) override { ++events; }
  void shutdown() override {}
  int events = 0;
};

std::optional<ExitStatus> RunToExit(boost::asio::io_context& io, const ProcessSpec& spec) {
  std::optional<ExitStatus> status;
  auto p = WorkerProcess::Spawn(io, spec, [&](const ExitStatus& s) { status = s; });
  EXPECT_TRUE(p) << (p ? "" : p.error().message);
  if (!p) return std::nullopt;
  testing::WaitFor(
      [&] {
        io.poll();
        return status.has_value();
      },
      std::chrono::seconds(20));
  return status;
}

TEST(WorkerProcess, TheLoopIsNotToldAboutTheFork) {
  boost::asio::io_context io;
  auto& witness = boost::asio::use_service<ForkWitness>(io);
  ProcessSpec spec;
  spec.program = "/bin/sh";
  spec.args = {"-c", "exit 3"};
  auto status = RunToExit(io, spec);
  ASSERT_TRUE(status);
  EXPECT_EQ(status->code, 3);
  EXPECT_EQ(witness.events, 0);
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(WorkerProcess, TheChildStartsCleanInItsOwnProcessGroup) {
  testing::TempDir dir;
  const std::string out = dir.path() + "/out";
  const int out_fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  ASSERT_GE(out_fd, 0);
  const int leaked = ::dup(2);  // not close-on-exec: the child must not get it all the same
  ASSERT_GE(leaked, 3);
  struct sigaction ignore {
  }, old{};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, &old);
  sigset_t blocked, previous;
  ::sigemptyset(&blocked);
  ::sigaddset(&blocked, SIGUSR2);
  ::pthread_sigmask(SIG_BLOCK, &blocked, &previous);

  boost::asio::io_context io;
  ProcessSpec spec;
  spec.program = "sh";  // found on PATH
  spec.args = {"-c",
               "echo pid=$$ pgrp=$(cut -d' ' -f5 /proc/$$/stat); "
               "grep -E '^Sig(Blk|Ign)' /proc/self/status; echo fds=$(ls /proc/self/fd)"};
  spec.env = {{"PATH", "/usr/bin:/bin"}};
  spec.stdout_fd = out_fd;
  const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(null_fd, 0);
  spec.stdin_fd = null_fd;  // whatever the test's own stdin is
  auto status = RunToExit(io, spec);
  ::close(null_fd);
  ::sigaction(SIGPIPE, &old, nullptr);
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  ::close(leaked);
  ::close(out_fd);
  ASSERT_TRUE(status);
  EXPECT_EQ(status->code, 0);
  const std::string text = ReadAll(out);
  std::istringstream lines(text);
  std::string pid, pgrp;
  lines >> pid >> pgrp;
  EXPECT_EQ(pid.substr(4), pgrp.substr(5)) << text;  // its own process group
  EXPECT_NE(text.find("SigBlk:\t0000000000000000"), std::string::npos) << text;
  const auto ign = text.find("SigIgn:\t");
  ASSERT_NE(ign, std::string::npos) << text;
  const uint64_t ignored = std::stoull(text.substr(ign + 8, 16), nullptr, 16);
  EXPECT_EQ(ignored & (uint64_t{1} << (SIGPIPE - 1)), 0u) << text;
  EXPECT_NE(text.find("fds=0 1 2 3\n"), std::string::npos) << text;  // 3: ls's own listing
}

TEST(WorkerProcess, AProgramThatCannotBeExecutedIsAnErrorNamingItAndLeavesNoChild) {
  testing::TempDir dir;
  const std::string program = dir.path() + "/train";
  std::ofstream(program) << "#!/bin/sh\nexit 0\n";
  ::chmod(program.c_str(), 0600);  // not executable
  boost::asio::io_context io;
  ProcessSpec spec;
  spec.program = program;
  auto p = WorkerProcess::Spawn(io, spec, [](const ExitStatus&) {});
  ASSERT_FALSE(p);
  EXPECT_EQ(p.error().message, "cannot start '" + program + "': Permission denied");
  const pid_t left = ::waitpid(-1, nullptr, WNOHANG);
  const int err = errno;
  EXPECT_EQ(left, -1);  // the failed child was reaped
  EXPECT_EQ(err, ECHILD);
}

TEST(WorkerProcess, StdioGivenAsEachOthersDescriptorsIsNotMixedUp) {
  testing::TempDir dir;
  const std::string a = dir.path() + "/a", b = dir.path() + "/b";
  // The test's own fds 1 and 2 become files for a moment; the child gets them swapped.
  const int saved_out = ::dup(1), saved_err = ::dup(2);
  ASSERT_GE(saved_out, 0);
  ASSERT_GE(saved_err, 0);
  const int fa = ::open(a.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  const int fb = ::open(b.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  ::dup2(fa, 1);
  ::dup2(fb, 2);
  boost::asio::io_context io;
  ProcessSpec spec;
  spec.program = "/bin/sh";
  spec.args = {"-c", "echo out; echo err >&2"};
  spec.stdout_fd = 2;
  spec.stderr_fd = 1;
  auto status = RunToExit(io, spec);
  ::dup2(saved_out, 1);
  ::dup2(saved_err, 2);
  for (int fd : {saved_out, saved_err, fa, fb}) ::close(fd);
  ASSERT_TRUE(status);
  EXPECT_EQ(status->code, 0);
  EXPECT_EQ(ReadAll(b), "out\n");
  EXPECT_EQ(ReadAll(a), "err\n");
}

}  // namespace
}  // namespace ftrun::launcher
