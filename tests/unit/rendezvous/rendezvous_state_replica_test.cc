// RendezvousState: what a round tells its members about flash-checkpoint replicas (the job's
// replica key and every member's replica endpoint), and what it tells nobody else.
#include <gtest/gtest.h>

#include "rendezvous/rendezvous_state.h"
#include "tests/unit/rendezvous/rendezvous_state_fixture.h"

namespace ftrun::rendezvous {
namespace {

class ReplicaViewTest : public RendezvousStateTest {
 protected:
  void JoinServing(const std::string& id, int replica_port) {
    NodeInfo n = Node(id);
    n.replica_port = replica_port;
    auto refusal = state_->Join(n, now_);
    ASSERT_FALSE(refusal) << refusal->message;
  }
};

TEST_F(ReplicaViewTest, MembersGetTheKeyAndEveryMembersEndpointInGroupRankOrder) {
  JobSpec spec = Spec(2, 2);
  spec.replica_key = "the-job-key-0123456789abcdef0123";
  Make(spec);
  JoinServing("a", 4001);
  JoinServing("b", 4002);
  JoinServing("c", 4003);  // beyond --nnodes: a spare
  ASSERT_EQ(phase(), Phase::kRunning);
  auto a = View("a"), b = View("b"), c = View("c");
  ASSERT_TRUE(a.member && b.member);
  EXPECT_EQ(a.assignment.replica_key, spec.replica_key);
  EXPECT_EQ(b.assignment.replica_key, spec.replica_key);
  const std::vector<std::string> peers = {"a.addr:4001", "b.addr:4002"};
  EXPECT_EQ(a.assignment.replica_peers, peers);
  EXPECT_EQ(b.assignment.replica_peers, peers);
  // A node outside the round learns neither.
  EXPECT_FALSE(c.member);
  EXPECT_TRUE(c.assignment.replica_key.empty());
  EXPECT_TRUE(c.assignment.replica_peers.empty());
}

TEST_F(ReplicaViewTest, ANodeWithoutReplicasHasAnEmptyEndpointAndNobodyServingMeansNoKey) {
  JobSpec spec = Spec(2, 2);
  spec.replica_key = "the-job-key-0123456789abcdef0123";
  Make(spec);
  JoinServing("a", 4001);
  Join("b");  // --flash-replicas 1, or its service could not listen
  auto a = View("a");
  ASSERT_TRUE(a.member);
  EXPECT_EQ(a.assignment.replica_peers, (std::vector<std::string>{"a.addr:4001", ""}));

  Make(spec);
  Join("a");
  Join("b");
  EXPECT_TRUE(View("a").assignment.replica_key.empty());
  EXPECT_TRUE(View("a").assignment.replica_peers.empty());
}

}  // namespace
}  // namespace ftrun::rendezvous
