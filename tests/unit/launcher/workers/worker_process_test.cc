// WorkerProcess::Spawn forks without telling the agent's loop: a service of the loop's
// io_context sees no fork event (before, the loop's resolver service joined the thread of an
// in-flight getaddrinfo at every spawn, and the child re-registered the loop's descriptors).
#include "launcher/workers/worker_process.h"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <optional>

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

}  // namespace
}  // namespace ftrun::launcher
