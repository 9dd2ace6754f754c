// RendezvousState on a fake clock: a member that cannot reach group rank 0's store (a
// partition) stops the round without spending a restart, and the next round waits longer
// each time.
#include <gtest/gtest.h>

#include "rendezvous/rendezvous_state.h"
#include "tests/unit/rendezvous/rendezvous_state_fixture.h"

namespace ftrun::rendezvous {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

class PartitionTest : public RendezvousStateTest {
 protected:
  void SetUp() override {
    JobSpec spec = Spec(2, 2, 1);
    spec.restart_backoff = Duration(1);
    Make(spec);
    alive_ = {"a", "b"};
    Join("a");
    Join("b");
    ASSERT_EQ(phase(), Phase::kRunning);
  }
  std::vector<Partition> Partitions() {
    std::vector<Partition> out;
    for (const auto& e : state_->TakeEvents()) {
      if (auto* p = std::get_if<Partition>(&e)) out.push_back(*p);
    }
    return out;
  }
  // b reports a partition in the running round; both stop; returns how long the next round
  // took to form (in 100 ms steps).
  Duration PartitionAndReform() {
    const uint64_t r = state_->round();
    state_->ReportUnreachable("b", r, "a.addr:1097: Connection refused", now_);
    EXPECT_EQ(phase(), Phase::kStopping);
    reason_ = View("a").reason;
    StopAll(r, {"a", "b"});
    Duration waited{0};
    while (phase() != Phase::kRunning && waited < Duration(60)) {
      Advance(milliseconds(100));
      waited += milliseconds(100);
    }
    return waited;
  }
  std::string reason_;  // the stop's, as every node saw it
};

TEST_F(PartitionTest, NamesThePairSpendsNoRestartAndBacksOff) {
  const Duration first = PartitionAndReform();
  auto p = Partitions();
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].from, "b.host at b.addr");
  EXPECT_EQ(p[0].to, "a.host at a.addr");
  EXPECT_NE(p[0].error.find("Connection refused"), std::string::npos);
  EXPECT_EQ(View("a").restart_count, 0) << "a partition spends no restart";
  EXPECT_NE(reason_.find("b.host at b.addr cannot reach node a.host at a.addr"), std::string::npos);
  EXPECT_GE(first, Duration(0.9));
  EXPECT_LE(first, Duration(1.2));
  const Duration second = PartitionAndReform();
  EXPECT_GE(second, Duration(1.9)) << "doubled";
  EXPECT_LE(second, Duration(2.2));
  ASSERT_EQ(phase(), Phase::kRunning);
  EXPECT_EQ(View("b").restart_count, 0);
  // Much later (past failure_window) the wait starts again from 1 s.
  Advance(seconds(601));
  EXPECT_LE(PartitionAndReform(), Duration(1.2));
}

TEST_F(PartitionTest, StaleOrImpossibleReportsChangeNothing) {
  const uint64_t r = state_->round();
  state_->ReportUnreachable("b", r + 1, "late", now_);   // another round
  state_->ReportUnreachable("a", r, "self", now_);       // group rank 0 does not probe
  state_->ReportUnreachable("zz", r, "outsider", now_);  // not a member
  EXPECT_EQ(phase(), Phase::kRunning);
  EXPECT_TRUE(Partitions().empty());
}

}  // namespace
}  // namespace ftrun::rendezvous
