// RendezvousState's restart policy (fake clock): restarts caused by the same node back off
// exponentially, a node that keeps failing is left out while spares or MIN allow, and a
// failure that a node loss explains counts against nobody.
#include <gtest/gtest.h>

#include "tests/unit/rendezvous/rendezvous_state_fixture.h"

namespace ftrun::rendezvous {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

class PolicyTest : public RendezvousStateTest {
 protected:
  void MakeWithPolicy(int min, int max, int exclude_after) {
    JobSpec s = Spec(min, max, /*max_restarts=*/10);
    s.restart_backoff = seconds(1);
    s.restart_backoff_max = seconds(4);
    s.failure_window = seconds(600);
    s.exclude_after = exclude_after;
    Make(s);
  }
  // `node` fails; every member stops; returns how long the next round took to form.
  Duration FailAndReform(const std::string& node, const std::vector<std::string>& members) {
    state_->ReportFailed(node, state_->round(), {Failure(0)}, now_);
    EXPECT_EQ(phase(), Phase::kStopping);
    stop_reason_ = View(members[0]).reason;
    StopAll(state_->round(), members);
    Duration waited{0};
    while (phase() == Phase::kForming && waited < seconds(60)) {
      Advance(milliseconds(100));
      waited += milliseconds(100);
    }
    EXPECT_EQ(phase(), Phase::kRunning) << View(members[0]).reason;
    return waited;
  }
  std::string stop_reason_;
};

TEST_F(PolicyTest, RepeatFailuresOfOneNodeBackOffExponentiallyUpToTheCap) {
  MakeWithPolicy(2, 2, /*exclude_after=*/0);
  Join("a");
  Join("b");
  alive_ = {"a", "b"};
  ASSERT_EQ(phase(), Phase::kRunning);
  EXPECT_LT(FailAndReform("b", {"a", "b"}), milliseconds(150));  // the first: at once
  Duration second = FailAndReform("b", {"a", "b"});
  EXPECT_GE(second, milliseconds(950));
  EXPECT_LT(second, milliseconds(1300));
  EXPECT_NE(stop_reason_.find("the next round waits 1s (b.host failed 2 times"), std::string::npos)
      << stop_reason_;
  Duration third = FailAndReform("b", {"a", "b"});
  EXPECT_GE(third, milliseconds(1950));
  EXPECT_LT(third, milliseconds(2300));
  FailAndReform("b", {"a", "b"});
  Duration capped = FailAndReform("b", {"a", "b"});
  EXPECT_GE(capped, milliseconds(3950));
  EXPECT_LT(capped, milliseconds(4300));
  // Another node's first failure does not wait for b's record.
  EXPECT_LT(FailAndReform("a", {"a", "b"}), milliseconds(150));
}

TEST_F(PolicyTest, ANodeThatKeepsFailingIsLeftOutWhileASpareCanTakeItsPlace) {
  MakeWithPolicy(2, 2, /*exclude_after=*/2);
  Join("a");
  Join("b");
  Join("s");  // a spare
  alive_ = {"a", "b", "s"};
  ASSERT_EQ(phase(), Phase::kRunning);
  FailAndReform("b", {"a", "b"});
  EXPECT_TRUE(View("b").member);
  FailAndReform("b", {"a", "b"});
  EXPECT_NE(View("b").excluded.find("failed 2 times"), std::string::npos) << View("b").excluded;
  EXPECT_NE(stop_reason_.find("b.host is left out of the next round"), std::string::npos)
      << stop_reason_;
  EXPECT_FALSE(View("b").member);
  EXPECT_TRUE(View("s").member);
  EXPECT_EQ(View("s").assignment.group_rank, 1);  // b's place
  // b may not come back.
  auto refusal = state_->Join(Node("b"), now_);
  ASSERT_TRUE(refusal);
  EXPECT_NE(refusal->message.find("excluded"), std::string::npos);
}

TEST_F(PolicyTest, NoNodeIsLeftOutBelowMin) {
  MakeWithPolicy(2, 2, /*exclude_after=*/2);
  Join("a");
  Join("b");
  alive_ = {"a", "b"};
  for (int i = 0; i < 3; ++i) FailAndReform("b", {"a", "b"});
  EXPECT_TRUE(View("b").member);
  EXPECT_TRUE(View("b").excluded.empty());
}

TEST_F(PolicyTest, FailuresThatANodeLossExplainsCountAgainstNobody) {
  MakeWithPolicy(1, 2, /*exclude_after=*/2);
  Join("a");
  Join("b");
  Join("s");
  alive_ = {"a", "b", "s"};
  FailAndReform("a", {"a", "b"});  // a's own failure: counted
  // b dies; a's collective fails first; then b is lost.
  state_->ReportFailed("a", state_->round(), {Failure(0)}, now_);
  alive_ = {"a", "s"};
  Advance(seconds(16));
  StopAll(state_->round(), {"a"});
  Duration waited{0};
  while (phase() == Phase::kForming && waited < seconds(10)) {
    Advance(milliseconds(100));
    waited += milliseconds(100);
  }
  ASSERT_EQ(phase(), Phase::kRunning);
  EXPECT_TRUE(View("a").member) << "a was blamed for b's loss: " << View("a").excluded;
  EXPECT_LT(waited, milliseconds(150)) << "a backed off for b's loss";
}

}  // namespace
}  // namespace ftrun::rendezvous
