// LocalCoordinator: the one-node job's rendezvous in-process — rounds, the restart budget,
// the fault-time save's collection, the job's end. Listener calls arrive posted.
#include "launcher/coordinator/local_coordinator.h"

#include <gtest/gtest.h>

#include "tests/unit/launcher/coordinator/recording_listener.h"

namespace ftrun::testing {
namespace {

class LocalCoordinatorTest : public ::testing::Test {
 protected:
  void Make(int max_restarts, bool fault_save = false) {
    launcher::LocalCoordinatorOptions o;
    o.job.max_restarts = max_restarts;
    o.job.fault_save = fault_save;
    o.job.nproc_per_node = 2;
    o.job = launcher::OneNodeJob(o.job);
    o.node.node_id = "n0";
    o.node.addr = "127.0.0.1";
    o.node.host = "n0";
    o.node.nproc_per_node = 2;
    coord = std::make_unique<launcher::LocalCoordinator>(io, o);
    coord->Start(&rec);
    Settle();
  }
  void Settle() {
    io.restart();
    io.poll();
  }
  std::vector<std::string> Take() { return std::exchange(rec.calls, {}); }
  // A worker of `rank` fails and the workers stop: the coordinator's last order.
  std::string FailAndStop(int rank) {
    coord->WorkersFailed(Failure(rank));
    coord->WorkersStopped();
    Settle();
    auto calls = Take();
    return calls.empty() ? "" : calls.back();
  }
  static std::vector<launcher::WorkerFailure> Failure(int rank) {
    launcher::WorkerFailure f;
    f.rank = rank;
    f.exitcode = 1;
    return {f};
  }

  boost::asio::io_context io;
  Recorder rec;
  std::unique_ptr<launcher::LocalCoordinator> coord;
};

TEST_F(LocalCoordinatorTest, TheRoundFormsAtOnce) {
  Make(0);
  EXPECT_EQ(Take(), std::vector<std::string>{"start 0"});
}

TEST_F(LocalCoordinatorTest, AFailureSpendsARestartThenTheNextRoundStarts) {
  Make(1);
  Take();
  EXPECT_EQ(FailAndStop(1), "start 1");
}

TEST_F(LocalCoordinatorTest, AFailureWithTheBudgetSpentFailsTheJob) {
  Make(0);
  Take();
  const std::string last = FailAndStop(0);
  EXPECT_EQ(last.rfind("failed ", 0), 0u) << last;
}

TEST_F(LocalCoordinatorTest, SuccessEndsTheJob) {
  Make(0);
  Take();
  coord->WorkersSucceeded();
  Settle();
  EXPECT_EQ(Take(), std::vector<std::string>{"succeeded"});
}

TEST_F(LocalCoordinatorTest, WithFaultSaveAFailureFirstCollectsTheRanksProgress) {
  Make(1, /*fault_save=*/true);
  Take();
  coord->WorkersFailed(Failure(0));
  Settle();
  auto calls = Take();
  ASSERT_GE(calls.size(), 2u);
  EXPECT_EQ(calls[0], "stopping 0");
  EXPECT_EQ(calls[1].rfind("save 0/", 0), 0u) << calls[1];
  coord->ReportProgress(1, {});  // no rank can save: the round stops
  Settle();
  calls = Take();
  ASSERT_FALSE(calls.empty());
  EXPECT_EQ(calls.back().rfind("restart", 0), 0u) << calls.back();
}

}  // namespace
}  // namespace ftrun::testing
