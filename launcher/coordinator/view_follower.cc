#include "launcher/coordinator/view_follower.h"

#include "common/log.h"

namespace ftrun::launcher {

using rendezvous::NodeView;
using rendezvous::Phase;

ViewFollower::ViewFollower(Coordinator::Listener* listener, ReportStopped report_stopped,
                           std::string role)
    : listener_(listener), report_stopped_(std::move(report_stopped)), role_(std::move(role)) {}

void ViewFollower::Apply(const NodeView& v) {
  if (finished_) return;
  // A stack-dump order newer than the first view this node saw (older ones are not ours).
  if (!stacks_seen_) {
    stacks_seen_ = true;
    last_stacks_id_ = v.stacks_id;
  } else if (v.stacks_id > last_stacks_id_) {
    last_stacks_id_ = v.stacks_id;
    if (v.member) listener_->OnStacksOrder(v.round, v.stacks_id);
  }
  last_view_ = v;
  if (v.check_id != 0 && v.check_id != last_check_id_) {
    last_check_id_ = v.check_id;
    listener_->OnCheckFinished(v.check_id, v.check_table, v.check_json);
  }
  if (!v.excluded.empty()) {
    finished_ = true;
    listener_->OnExcluded(v.excluded);
    return;
  }
  if (v.restart_count > announced_restarts_) {
    announced_restarts_ = v.restart_count;
    // torchrun's line, on every node: the restart was spent job-wide.
    LauncherLog()->warn("[{}] Worker group FAILED. {}/{} attempts left; will restart worker group",
                        role_, v.max_restarts - v.restart_count + 1, v.max_restarts);
  }
  if (v.phase == Phase::kSucceeded || v.phase == Phase::kFailed) {
    finished_ = true;
    JobResult r;
    r.succeeded = v.phase == Phase::kSucceeded;
    r.reason = v.reason;
    r.failures = v.failures;
    listener_->OnJobFinished(r);
    return;
  }
  if ((v.phase == Phase::kSaving || v.phase == Phase::kStopping) && v.member &&
      stopping_round_ != v.round) {
    stopping_round_ = v.round;
    listener_->OnRoundStopping(v.round, v.reason, v.restart_count);
  }
  if (v.phase == Phase::kSaving && v.member && v.save) {
    const auto& o = *v.save;
    std::string key =
        fmt::format("{}/{}/{}/{}/{}", v.round, o.id, o.collecting, o.step, o.finalize);
    if (key != last_save_key_) {
      last_save_key_ = key;
      listener_->OnSaveOrder(v.round, o);
    }
  }
  // A running round checks the nodes waiting outside it: a waiting node probes, a member's
  // agent answers while its workers run.
  if (v.phase == Phase::kRunning && v.check && v.check->id != last_check_order_) {
    last_check_order_ = v.check->id;
    listener_->OnCheckOrder(v.round, *v.check);
  }
  if (workers_live_) {
    const bool ours_stopping = v.phase == Phase::kStopping && v.round == *started_round_;
    const bool moved_on = v.round != *started_round_ || !v.member;
    if ((ours_stopping || moved_on) && stop_asked_round_ != started_round_) {
      stop_asked_round_ = started_round_;
      listener_->OnRestartRequested(v.reason.empty() ? "this node left the round" : v.reason);
    }
    return;  // nothing new starts before these workers have stopped
  }
  if (v.phase == Phase::kStopping && v.member && stop_reported_round_ != v.round) {
    stop_reported_round_ = v.round;
    report_stopped_(v.round);  // nothing of ours runs in this round
    return;
  }
  if (v.phase == Phase::kChecking && v.member && v.check && v.check->id != last_check_order_) {
    last_check_order_ = v.check->id;
    listener_->OnCheckOrder(v.round, *v.check);
    return;
  }
  if (v.phase == Phase::kRunning && !v.member && spare_round_ != std::pair(v.round, v.spare)) {
    spare_round_ = std::pair(v.round, v.spare);
    if (v.spare) {
      listener_->OnWaitingAsSpare(v.round);
    } else {
      listener_->OnWaitingForNodeUnit(v.round);
    }
    return;
  }
  if (v.phase == Phase::kRunning && v.member && started_round_ != v.round) {
    started_round_ = v.round;
    started_group_rank_ = v.assignment.group_rank;
    workers_live_ = true;
    listener_->OnRoundStarted(v.assignment);
  }
}

void ViewFollower::WorkersStopped() {
  if (!workers_live_) return;
  workers_live_ = false;
  if (stop_reported_round_ != started_round_) {
    stop_reported_round_ = started_round_;
    report_stopped_(*started_round_);
  }
  Apply(last_view_);  // the job may already be further on
}

}  // namespace ftrun::launcher
