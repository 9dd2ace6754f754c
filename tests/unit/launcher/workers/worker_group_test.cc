// WorkerGroup with a fake spawner and clock: start, exits, the stop with its grace, and a
// start that fails half-way.
#include "launcher/workers/worker_group.h"

#include <gtest/gtest.h>

#include <csignal>

#include "tests/support/fake_clock.h"
#include "tests/unit/launcher/agent/agent_fakes.h"

namespace ftrun::testing {
namespace {

using launcher::ProcessPlan;
using launcher::WorkerGroup;

class WorkerGroupTest : public ::testing::Test {
 protected:
  std::unique_ptr<WorkerGroup> Make(std::vector<std::string> programs) {
    std::vector<ProcessPlan> plans;
    for (size_t i = 0; i < programs.size(); ++i) {
      ProcessPlan p;
      p.program = programs[i];
      p.local_rank = static_cast<int>(i);
      p.rank = static_cast<int>(i);
      plans.push_back(p);
    }
    return std::make_unique<WorkerGroup>(
        io, spawner, clock, rendezvous::NodeAssignment{}, std::move(plans),
        [this](const WorkerGroup::Worker& w) { exits.push_back(w.local_rank); },
        [this] { ++all_exited; });
  }
  void Settle() {
    io.restart();
    io.poll();
  }

  boost::asio::io_context io;
  FakeClock clock;
  FakeSpawner spawner{io};
  std::vector<int> exits;
  int all_exited = 0;
};

TEST_F(WorkerGroupTest, ReportsEachExitThenTheWholeGroupOnce) {
  auto g = Make({"a", "b"});
  ASSERT_TRUE(g->Start());
  EXPECT_EQ(g->live_count(), 2u);
  spawner.children.at(1)->Exit(0);
  EXPECT_EQ(exits, std::vector<int>{1});
  EXPECT_EQ(all_exited, 0);
  spawner.children.at(0)->Exit(2);
  EXPECT_EQ(exits, (std::vector<int>{1, 0}));
  EXPECT_EQ(all_exited, 1);
  EXPECT_EQ(g->workers()[0].status->code, 2);
}

TEST_F(WorkerGroupTest, StopSignalsEveryGroupThenKillsWhatIsLeftAfterTheGrace) {
  auto g = Make({"a", "b"});
  ASSERT_TRUE(g->Start());
  spawner.children.at(0)->ignores_sigterm = true;
  g->Stop(SIGTERM, std::chrono::milliseconds(300));
  Settle();
  ASSERT_EQ(spawner.children.size(), 2u) << "kept alive by the group until it is destroyed";
  EXPECT_EQ(g->live_count(), 1u);
  g->Stop(SIGTERM, std::chrono::milliseconds(300));  // a repeat changes nothing
  // SIGCONT after the stop signal: a stopped worker acts on it at once.
  EXPECT_EQ(spawner.children.at(0)->group_signals, (std::vector<int>{SIGTERM, SIGCONT}));
  clock.Advance(std::chrono::milliseconds(299));
  EXPECT_EQ(g->live_count(), 1u);
  clock.Advance(std::chrono::milliseconds(1));
  Settle();
  // SIGKILL, then once more to every group when the last one exited (grandchildren).
  EXPECT_EQ(spawner.children.at(0)->group_signals,
            (std::vector<int>{SIGTERM, SIGCONT, SIGKILL, SIGKILL}));
  EXPECT_EQ(g->live_count(), 0u);
  EXPECT_EQ(all_exited, 1);
}

TEST_F(WorkerGroupTest, AStartThatFailsStopsTheStartedOnesAndNamesTheProgram) {
  spawner.missing.insert("missing");
  auto g = Make({"a", "missing", "c"});
  auto s = g->Start();
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("missing"), std::string::npos);
  EXPECT_EQ(spawner.spawned, 1);
  Settle();
  EXPECT_EQ(all_exited, 1) << "the started one was killed and reaped";
}

}  // namespace
}  // namespace ftrun::testing
