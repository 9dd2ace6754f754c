// RendezvousState on a fake clock: a member that cannot reach another member's store (a
// partition) stops the round without spending a restart, and the next round waits longer
// each time; a member whose transport is gone is not partitioned but lost.
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
    state_->ReportUnreachable("b", r, 0, "a.addr:1097: Connection refused", now_);
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
  state_->ReportUnreachable("b", r + 1, 0, "late", now_);  // another round
  state_->ReportUnreachable("a", r, 0, "self", now_);      // its own store
  state_->ReportUnreachable("b", r, 2, "no such rank", now_);
  state_->ReportUnreachable("b", r, -1, "no such rank", now_);
  state_->ReportUnreachable("zz", r, 0, "outsider", now_);  // not a member
  EXPECT_EQ(phase(), Phase::kRunning);
  EXPECT_TRUE(Partitions().empty());
}

// Three nodes; b and c (group ranks 1 and 2) cannot reach each other, both reach a and the
// server. Every member's view lists the members' listening stores (group rank 0's where its
// workers are told it is).
class PairPartitionTest : public RendezvousStateTest {
 protected:
  void SetUp() override {
    Make(Spec(3, 3, 0));
    alive_ = {"a", "b", "c"};
    for (const std::string id : {"a", "b", "c"}) {
      NodeInfo n = Node(id);
      n.store_listens = id != "c" || listening_c_;
      ASSERT_FALSE(state_->Join(n, now_));
    }
    ASSERT_EQ(phase(), Phase::kRunning);
  }
  std::vector<Partition> Partitions() {
    std::vector<Partition> out;
    for (const auto& e : state_->TakeEvents()) {
      if (auto* p = std::get_if<Partition>(&e)) out.push_back(*p);
    }
    return out;
  }
  bool listening_c_ = true;
};

TEST_F(PairPartitionTest, EveryMemberSeesTheStoresItChecks) {
  const NodeView v = View("b");
  ASSERT_EQ(v.store_peers.size(), 3u);
  EXPECT_EQ(v.store_peers[0].group_rank, 0);
  EXPECT_EQ(v.store_peers[0].addr, v.assignment.master_addr);
  EXPECT_EQ(v.store_peers[0].port, v.assignment.master_port);
  EXPECT_EQ(v.store_peers[2].group_rank, 2);
  EXPECT_EQ(v.store_peers[2].addr, "c.addr");
  EXPECT_EQ(v.store_peers[2].port, 1000 + 'c');
  EXPECT_TRUE(state_->Status(now_).view.store_peers.empty()) << "operators' view: none";
}

TEST_F(PairPartitionTest, ThePairIsNamedAndNoRestartSpent) {
  const uint64_t r = state_->round();
  state_->ReportUnreachable("b", r, 2, "c.addr:1099: No route to host", now_);
  auto p = Partitions();
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].from, "b.host at b.addr");
  EXPECT_EQ(p[0].to, "c.host at c.addr");
  EXPECT_EQ(p[0].to_rank, 2);
  EXPECT_NE(View("a").reason.find("node b.host at b.addr cannot reach node c.host at c.addr "
                                  "(group rank 2's store c.addr:1099: No route to host)"),
            std::string::npos)
      << View("a").reason;
  EXPECT_EQ(phase(), Phase::kStopping);
  EXPECT_EQ(View("a").restart_count, 0);
  // The other side's report of the same round changes nothing more.
  state_->ReportUnreachable("c", r, 1, "b.addr:1098: No route to host", now_);
  EXPECT_TRUE(Partitions().empty());
  StopAll(r, {"a", "b", "c"});
  Advance(std::chrono::milliseconds(1100));
  EXPECT_EQ(phase(), Phase::kRunning) << "the same three after the back-off";
  EXPECT_EQ(View("c").assignment.group_world_size, 3);
  EXPECT_EQ(View("c").restart_count, 0);
}

TEST_F(PairPartitionTest, AMemberWhoseTransportIsGoneIsLostNotPartitioned) {
  const uint64_t r = state_->round();
  state_->Disconnected("c", now_);
  state_->ReportUnreachable("b", r, 2, "c.addr:1099: Connection refused", now_);
  EXPECT_TRUE(Partitions().empty());
  EXPECT_EQ(phase(), Phase::kRunning) << "the liveness rules decide";
}

class PairPartitionWithoutStoreTest : public PairPartitionTest {
 protected:
  void SetUp() override {
    listening_c_ = false;
    PairPartitionTest::SetUp();
  }
};

TEST_F(PairPartitionWithoutStoreTest, AStoreThatDoesNotListenIsNotListed) {
  const NodeView v = View("a");
  ASSERT_EQ(v.store_peers.size(), 2u);
  EXPECT_EQ(v.store_peers[1].group_rank, 1);
}

}  // namespace
}  // namespace ftrun::rendezvous
