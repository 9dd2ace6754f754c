// NetworkCheckSession: one pre-flight network check of a round's members, run by the
// rendezvous state machine. It walks the plan of network_check_plan.h (round 0, then round 1
// when there are suspects), one wave at a time: every node of the wave gets a CheckOrder, the
// clients report their measurements (and, with run_command, both sides their command's
// outcome), and a wave ends when every result is in or at its deadline (missing results fail
// with "no result"). Then Evaluate gives each node its verdict.
//
// Pure: no I/O, time passed in. Thread: whatever owns it (the state machine's).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "rendezvous/job_state.h"
#include "rendezvous/network_check_plan.h"

namespace ftrun::rendezvous {

class NetworkCheckSession {
 public:
  // `members`: the round's nodes in rank order. `first_id`: the first order id to use (ids
  // stay unique across the sessions of one job). `probe_key`: every order of this session
  // carries it (the caller makes a new one per session: NewSecret()).
  NetworkCheckSession(std::vector<NodeInfo> members, CheckSettings settings, uint64_t first_id,
                      TimePoint now, std::string probe_key = "");

  // This node's order for the current wave (nullopt once done or for a stranger).
  std::optional<CheckOrder> OrderFor(const std::string& node_id) const;
  // A node's results for order `order_id`; stale or unknown ones are ignored. True when the
  // session moved on (a new wave, or done).
  bool Report(const std::string& node_id, uint64_t order_id,
              const std::vector<CheckTaskResult>& results, TimePoint now);
  // Applies the wave's deadline. True when the session moved on.
  bool Tick(TimePoint now);

  bool done() const { return done_; }
  const NetworkCheckReport& report() const { return report_; }
  TimePoint deadline() const { return deadline_; }
  uint64_t next_id() const { return next_id_; }
  // The node's host name (for messages), or the id itself.
  std::string HostOf(const std::string& node_id) const;

 private:
  struct Pending {
    CheckPair pair;
    std::optional<CheckTaskResult> probe;  // from the client
    std::optional<CheckTaskResult> cmd_a;  // with run_command, from each side
    std::optional<CheckTaskResult> cmd_b;
  };

  void StartRound(int round, std::vector<CheckPair> pairs, TimePoint now);
  void StartWave(TimePoint now);
  bool WaveComplete() const;
  void FinishWave(TimePoint now);
  PairResult Resolve(const Pending& p) const;
  const NodeInfo* Member(const std::string& node_id) const;

  std::vector<NodeInfo> members_;
  std::vector<std::string> ids_;
  CheckSettings settings_;
  std::string probe_key_;
  NetworkCheckOptions options_;
  uint64_t next_id_;
  int round_ = 0;
  std::vector<CheckPair> round_pairs_;  // the current round's plan
  int wave_ = -1;
  int last_wave_ = -1;
  uint64_t order_id_ = 0;
  TimePoint deadline_;
  std::map<int, Pending> pending_;      // pair index (in round_pairs_) -> results so far
  std::vector<PairResult> results_[2];  // per round
  bool done_ = false;
  NetworkCheckReport report_;
};

}  // namespace ftrun::rendezvous
