// RendezvousState with --network-check: a node waiting outside the running round is checked
// while it waits (against a checked member, the round undisturbed), so that its promotion
// forms the round at once; a failing one is excluded before it is needed; a check older than
// spare_check_max_age is done again at the promotion.
#include <gtest/gtest.h>

#include "rendezvous/rendezvous_state.h"
#include "tests/unit/rendezvous/rendezvous_state_fixture.h"

namespace ftrun::rendezvous {
namespace {

using std::chrono::seconds;

class SpareCheckTest : public RendezvousStateTest {
 protected:
  void Start() {
    JobSpec s = Spec(1, 2);
    s.check.enabled = true;
    s.check.spare_check_max_age = seconds(60);
    Make(s);
    JoinChecked("a");
    JoinChecked("b");
    alive_ = {"a", "b"};
    ASSERT_EQ(phase(), Phase::kChecking);  // the first round's own check
    Answer({"a", "b"}, true);
    ASSERT_EQ(phase(), Phase::kRunning);
  }
  void JoinChecked(const std::string& id) {
    NodeInfo n = Node(id);
    n.probe_port = 2000 + id[0];
    auto refusal = state_->Join(n, now_);
    ASSERT_FALSE(refusal) << refusal->message;
  }
  // Every order the nodes hold is answered (the client of each pair reports) until none is
  // left. Returns how many orders were answered.
  int Answer(const std::vector<std::string>& ids, bool ok) {
    int answered = 0;
    for (bool more = true; more;) {
      more = false;
      for (const auto& id : ids) {
        NodeView v = View(id);
        if (!v.check) continue;
        std::vector<CheckTaskResult> results;
        for (const auto& t : v.check->tasks) {
          if (!t.client) continue;
          CheckTaskResult r;
          r.index = t.index;
          r.probed = true;
          r.probe_ok = ok;
          r.reason = ok ? "" : "connection refused by " + t.peer_host;
          r.mbps_ab = r.mbps_ba = ok ? 1000 : 0;
          results.push_back(r);
        }
        if (results.empty()) continue;
        state_->ReportCheck(id, v.round, v.check->id, results, now_);
        ++answered;
        more = true;
      }
    }
    return answered;
  }
  // a is lost; b and the spare form the next round.
  void LoseA() {
    alive_ = {"b", "s"};
    Advance(seconds(16));
    ASSERT_EQ(phase(), Phase::kStopping);
    StopAll(View("b").round, {"b"});
  }
};

TEST_F(SpareCheckTest, ASpareIsCheckedWhileItWaitsAndPromotedWithoutAnotherCheck) {
  Start();
  const uint64_t round = View("a").round;
  JoinChecked("s");
  alive_ = {"a", "b", "s"};
  ASSERT_TRUE(View("s").spare);
  ASSERT_TRUE(View("s").check) << "no check order for the waiting node";
  EXPECT_EQ(phase(), Phase::kRunning);  // the round runs on meanwhile
  EXPECT_FALSE(View("s").check->run_command) << "never a command beside a member's workers";
  EXPECT_GE(Answer({"a", "b", "s"}, true), 1);
  EXPECT_FALSE(View("s").check);
  EXPECT_EQ(View("a").round, round);
  EXPECT_TRUE(View("s").excluded.empty());
  LoseA();
  EXPECT_EQ(phase(), Phase::kRunning) << "the promotion checked the spare again";
  EXPECT_TRUE(View("s").member);
}

TEST_F(SpareCheckTest, ASpareThatFailsItsCheckIsExcludedBeforeItIsNeeded) {
  Start();
  const uint64_t round = View("a").round;
  JoinChecked("s");
  alive_ = {"a", "b", "s"};
  ASSERT_TRUE(View("s").check);
  Answer({"a", "b", "s"}, false);
  EXPECT_NE(View("s").excluded.find("while it waited"), std::string::npos) << View("s").excluded;
  EXPECT_FALSE(state_->IsNode("s"));
  // The member it was paired with (a checked one) keeps its place, and the round runs on.
  EXPECT_EQ(phase(), Phase::kRunning);
  EXPECT_EQ(View("a").round, round);
  EXPECT_TRUE(View("a").excluded.empty());
  EXPECT_TRUE(View("b").excluded.empty());
}

TEST_F(SpareCheckTest, AnOldSpareCheckIsDoneAgainAtThePromotion) {
  Start();
  JoinChecked("s");
  alive_ = {"a", "b", "s"};
  Answer({"a", "b", "s"}, true);
  ASSERT_FALSE(View("s").check);
  Advance(seconds(61));  // past spare_check_max_age
  EXPECT_FALSE(View("s").check) << "a waiting node is not checked twice while it waits";
  LoseA();
  EXPECT_EQ(phase(), Phase::kChecking);
  Answer({"b", "s"}, true);
  EXPECT_EQ(phase(), Phase::kRunning);
  EXPECT_TRUE(View("s").member);
}

}  // namespace
}  // namespace ftrun::rendezvous
