#include "launcher/channels/file_timer_server.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "tests/support/test_support.h"

namespace ftrun::launcher {
namespace {

using namespace std::chrono_literals;

double Epoch(double from_now) {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
             .count() +
         from_now;
}

std::string Request(pid_t pid, const std::string& scope, double expiration, int sig) {
  return "{\"version\": 1, \"pid\": " + std::to_string(pid) + ", \"scope_id\": \"" + scope +
         "\", \"expiration_time\": " + std::to_string(expiration) +
         ", \"signal\": " + std::to_string(sig) + "}\n";
}

void Send(const std::string& fifo, const std::string& text) {
  int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
  ASSERT_GE(fd, 0) << "server not listening";
  ASSERT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  ::close(fd);
}

TEST(FileTimerServer, ParsesAcquireAndRelease) {
  boost::asio::io_context io;
  FileTimerServer s(io, "/unused", [](pid_t) { return true; });
  EXPECT_TRUE(s.HandleLine(Request(10, "a", Epoch(100), 9)));
  EXPECT_TRUE(s.HandleLine(Request(10, "b", Epoch(100), 9)));
  EXPECT_EQ(s.timer_count(), 2u);
  EXPECT_TRUE(s.HandleLine(Request(10, "a", -1, 0)));
  EXPECT_EQ(s.timer_count(), 1u);
  for (const char* bad :
       {"", "{", "[]", "{\"pid\": 1}",
        "{\"pid\": \"x\", \"scope_id\": \"a\", "
        "\"expiration_time\": 1, \"signal\": 9}",
        // out of range (found by fuzzing: the conversion to int overflowed)
        "{\"pid\": 1e71, \"scope_id\": \"a\", \"expiration_time\": 1, \"signal\": 9}",
        "{\"pid\": 10, \"scope_id\": \"a\", \"expiration_time\": 1, \"signal\": 1e71}",
        "{\"pid\": 10, \"scope_id\": \"a\", \"expiration_time\": 1, \"signal\": -9}"}) {
    EXPECT_FALSE(s.HandleLine(bad)) << bad;
  }
  EXPECT_EQ(s.timer_count(), 1u);
}

TEST(FileTimerServer, ExpiredTimerSignalsTheWorker) {
  testing::TempDir dir;
  pid_t child = ::fork();
  if (child == 0) {
    ::setpgid(0, 0);
    for (;;) ::pause();
  }
  boost::asio::io_context io;
  bool asked_about_child = false;
  FileTimerServer s(io, dir / "fifo", [&](pid_t p) { return asked_about_child = (p == child); });
  ASSERT_TRUE(s.Start());
  Send(dir / "fifo", "garbage\n" + Request(child, "step", Epoch(0.2), SIGTERM) +
                         Request(child, "released", Epoch(0.1), SIGKILL) +
                         Request(child, "released", -1, 0));
  int status = 0;
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (::waitpid(child, &status, WNOHANG) == 0 && std::chrono::steady_clock::now() < deadline) {
    io.run_for(20ms);
  }
  ASSERT_TRUE(WIFSIGNALED(status)) << "the child was not signalled";
  EXPECT_EQ(WTERMSIG(status), SIGTERM);  // the released SIGKILL timer did not fire
  EXPECT_TRUE(asked_about_child);
  EXPECT_EQ(s.timer_count(), 0u);
  s.Stop();
  EXPECT_FALSE(testing::FileExists(dir / "fifo"));
}

TEST(FileTimerServer, NonWorkerPidsAreNotSignalled) {
  testing::TempDir dir;
  boost::asio::io_context io;
  FileTimerServer s(io, dir / "fifo", [](pid_t) { return false; });
  ASSERT_TRUE(s.Start());
  Send(dir / "fifo", Request(::getpid(), "x", Epoch(0.05), SIGKILL));
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        io.run_for(10ms);
        return s.timer_count() == 0;
      },
      5s));
}

}  // namespace
}  // namespace ftrun::launcher
