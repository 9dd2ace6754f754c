// The fake-clock fixture shared by rendezvous_state_test.cc and rendezvous_state_save_test.cc.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "rendezvous/rendezvous_state.h"

namespace ftrun::rendezvous {

// A fake clock: tests move time explicitly and call Tick.
class RendezvousStateTest : public ::testing::Test {
 protected:
  JobSpec Spec(int min, int max, int max_restarts = 0) {
    JobSpec s;
    s.run_id = "job";
    s.min_nodes = min;
    s.max_nodes = max;
    s.max_restarts = max_restarts;
    s.last_call_timeout = std::chrono::seconds(30);
    s.join_timeout = std::chrono::seconds(600);
    s.liveness_timeout = std::chrono::seconds(15);
    s.disconnect_grace = std::chrono::seconds(1);
    s.fault_save = false;  // the save phase has its own tests (rendezvous_state_save_test.cc)
    // The restart policy has its own tests (rendezvous_state_policy_test.cc).
    s.restart_backoff = Duration(0);
    s.exclude_after = 0;
    return s;
  }
  void Make(JobSpec spec) { state_.emplace(std::move(spec), now_); }
  NodeInfo Node(const std::string& id, int nproc = 2, int node_rank = -1, int port = 0) {
    NodeInfo n;
    n.node_id = id;
    n.addr = id + ".addr";
    n.host = id + ".host";
    n.node_rank = node_rank;
    n.nproc_per_node = nproc;
    n.free_port = port ? port : 1000 + static_cast<int>(id[0]);
    return n;
  }
  void Join(const std::string& id, int nproc = 2, int node_rank = -1) {
    auto refusal = state_->Join(Node(id, nproc, node_rank), now_);
    ASSERT_FALSE(refusal) << refusal->message;
  }
  void Advance(std::chrono::duration<double> d) {
    now_ += std::chrono::duration_cast<Clock::duration>(d);
    // Keep everyone alive unless a test says otherwise.
    for (const auto& id : alive_) state_->Seen(id, now_);
    state_->Tick(now_);
  }
  // The last call (30 s) runs out: still forming 1 s before, past it 1 s after.
  void RunOutTheLastCall() {
    Advance(std::chrono::seconds(29));
    EXPECT_EQ(phase(), Phase::kForming) << "the last call ended early";
    Advance(std::chrono::seconds(2));
  }
  void StopAll(uint64_t round, const std::vector<std::string>& ids) {
    for (const auto& id : ids) state_->ReportStopped(id, round, 0, now_);
  }
  // A round of `claims` (node id, the group rank it says it had in its last round, -1: none)
  // joining in that order: the group rank each node gets ({} if no round ran).
  std::map<std::string, int> Form(const std::vector<std::pair<std::string, int>>& claims) {
    alive_.clear();
    for (const auto& [id, rank] : claims) {
      NodeInfo n = Node(id);
      n.last_group_rank = rank;
      if (auto refusal = state_->Join(n, now_)) ADD_FAILURE() << refusal->message;
      alive_.push_back(id);
    }
    Advance(std::chrono::seconds(1));
    std::map<std::string, int> ranks;
    if (phase() != Phase::kRunning) return ranks;
    for (const auto& [id, rank] : claims) ranks[id] = View(id).assignment.group_rank;
    return ranks;
  }
  Phase phase() const { return state_->phase(); }
  NodeView View(const std::string& id) const { return state_->View(id); }
  WorkerFailure Failure(int rank, int exitcode = 1) {
    WorkerFailure f;
    f.rank = rank;
    f.exitcode = exitcode;
    f.host = "h";
    return f;
  }

  TimePoint now_ = TimePoint() + std::chrono::seconds(1000);
  std::optional<RendezvousState> state_;
  std::vector<std::string> alive_;
};

}  // namespace ftrun::rendezvous
