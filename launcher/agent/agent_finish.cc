// The end of the job for this node: Agent::Finish and what it records (the fault record's
// context, the newest step and snapshot). Split from agent.cc, which holds the transitions
// while the job runs.
#include <chrono>
#include <filesystem>

#include "common/clock.h"
#include "common/log.h"
#include "launcher/agent/agent.h"
#include "launcher/agent/outcome.h"
#include "rendezvous/credentials.h"

namespace ftrun::launcher {

void Agent::ExitExcluded(const std::string& reason) {
  if (state_ == AgentState::kFinished) return;
  LauncherLog()->error("this node leaves the job: {} (exit code {})", reason, kExitExcluded);
  events_.NodeExcluded(reason);
  if (group_ && group_->live_count() > 0) group_->Stop(SIGKILL, std::chrono::milliseconds(0));
  Finish(kExitExcluded);
}

void Agent::Finish(int exit_code) {
  if (state_ == AgentState::kFinished) return;
  Enter(AgentState::kFinished, "the job is over for this node");
  if (result_ && exit_code == 1 && stop_signal_ == 0) {
    if (auto repeated = history_.RepeatedException(*result_)) {
      LauncherLog()->error(
          "restarting cannot help: the same exception ended the previous attempt too ({}); "
          "exit code {}",
          rendezvous::Printable(*repeated, 200), kExitNotRetryable);
      exit_code = kExitNotRetryable;
    }
  }
  exit_code_ = exit_code;
  boost::system::error_code ec;
  signals_.cancel(ec);
  hangs_.Stop();
  fault_timer_->Cancel();
  channels_.Stop();
  metrics_.Stop();
  preflight_.Cancel();
  coordinator_->Shutdown();
  spawner_.Shutdown();  // --warm-restart's standbys
  if (opts_.store) opts_.store->Stop();
  if (result_) {
    if (!result_->succeeded && !attempt_dir_.empty()) {
      // torchrun's layout: <run dir>/attempt_<n>; msrun's: the log directory itself.
      std::filesystem::path dir(attempt_dir_);
      if (dir.filename().string().rfind("attempt_", 0) == 0) dir = dir.parent_path();
      WriteFaultRecord(dir / "fault_record.json", history_.RecordJson(*result_, FaultContext()));
    }
    if (had_faults() && !opts_.report_path.empty()) {
      LauncherLog()->info("post-mortem page path={} (ftrun report; written as the agent exits)",
                          opts_.report_path);
    }
    failure_report_ = ReportOutcome(*result_, exit_code_, *opts_.planner, opts_.agent_env, events_);
  }
  // A failed job keeps its newest memory snapshots: the loop runs until they are stored.
  if (exit_code_ != 0) flash_.PersistForExit([] {});
}

FaultRecordContext Agent::FaultContext() const {
  FaultRecordContext c;
  c.run_id = config_.run_id;
  c.host = opts_.host.get();
  c.max_restarts = config_.max_restarts;
  c.exit_code = exit_code_;
  c.finished = WallSeconds();
  c.last_step = NewestStep(false);
  c.newest_snapshot = NewestSnapshot();
  return c;
}

std::optional<int64_t> Agent::NewestStep(bool completed) const {
  std::optional<int64_t> newest;
  if (const ControlServer* control = channels_.control()) {
    for (int lr = 0; lr < control->rank_count(); ++lr) {
      const RankControl& rc = control->rank(lr);
      const int64_t step = completed && rc.updating ? rc.step - 1 : rc.step;
      if (step >= 0 && (!newest || step > *newest)) newest = step;
    }
  }
  return newest;
}

std::optional<int64_t> Agent::NewestSnapshot() const {
  std::optional<int64_t> newest;
  for (int lr = 0; lr < config_.nproc_per_node; ++lr) {
    if (auto held = flash_.NewestStep(lr)) {
      const auto step = static_cast<int64_t>(*held);
      if (!newest || step > *newest) newest = step;
    }
  }
  return newest;
}

}  // namespace ftrun::launcher
