// ViewFollower: turns the job's views (rendezvous/job_state.h) into the agent's orders, for
// every coordinator alike. It remembers which round this node's workers run, so that a stop
// is asked for once, a round is started once and only after the previous one has stopped,
// and a stop report goes out once per round.
//
//   view running, member, new round          -> Listener::OnRoundStarted
//   view stopping for our round, or the job
//   moved on while our workers still run     -> Listener::OnRestartRequested
//   view saving, member, new order           -> Listener::OnSaveOrder
//   view checking, member, new check order   -> Listener::OnCheckOrder
//   view running, new check order (a waiting
//   node's check, it or its reference member) -> Listener::OnCheckOrder
//   a new finished network check             -> Listener::OnCheckFinished
//   view excluded                            -> Listener::OnExcluded (and nothing after)
//   a new stack-dump order, member           -> Listener::OnStacksOrder
//   view stopping, nothing of ours running   -> report_stopped(round)
//   view running, not a member, no workers   -> Listener::OnWaitingAsSpare (view.spare) or
//                                               OnWaitingForNodeUnit (once per round)
//   view succeeded / failed                  -> Listener::OnJobFinished
//
// Thread: loop only. Calls the listener synchronously: callers must not be inside a
// listener call (coordinators post).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "launcher/coordinator/coordinator.h"
#include "rendezvous/job_state.h"

namespace ftrun::launcher {

class ViewFollower {
 public:
  using ReportStopped = std::function<void(uint64_t round)>;

  // `role` only labels torchrun's "Worker group FAILED" line.
  ViewFollower(Coordinator::Listener* listener, ReportStopped report_stopped,
               std::string role = "default");

  void Apply(const rendezvous::NodeView& view);
  // The agent's workers have all exited (after a stop it was asked for, or one it made
  // itself after a local failure).
  void WorkersStopped();

  bool finished() const { return finished_; }
  // The round whose workers this node runs (or ran last).
  std::optional<uint64_t> started_round() const { return started_round_; }
  // This node's group rank in that round (-1: none started).
  int started_group_rank() const { return started_group_rank_; }
  const rendezvous::NodeView& last_view() const { return last_view_; }

 private:
  Coordinator::Listener* listener_;
  ReportStopped report_stopped_;
  std::string role_;
  rendezvous::NodeView last_view_;
  int announced_restarts_ = 0;
  std::string last_save_key_;
  uint64_t last_check_id_ = 0;  // the last network check whose results were passed on
  uint64_t last_check_order_ = 0;
  bool stacks_seen_ = false;  // the first view sets the baseline of stack-dump orders
  uint64_t last_stacks_id_ = 0;
  std::optional<uint64_t> stopping_round_;
  std::optional<uint64_t> started_round_;
  int started_group_rank_ = -1;
  bool workers_live_ = false;
  std::optional<uint64_t> stop_asked_round_;
  std::optional<uint64_t> stop_reported_round_;
  // The last round announced as waited out (as a spare or not).
  std::optional<std::pair<uint64_t, bool>> spare_round_;
  bool finished_ = false;
};

}  // namespace ftrun::launcher
