#include "launcher/agent/agent_events.h"

#include <fmt/format.h>

#include "common/signals.h"
#include "common/version.h"

namespace ftrun::launcher {

void AgentEvents::AgentStarted(const LaunchConfig& config, const std::string& host) {
  Emit(EventLog::Event("agent_started")
           .Set("version", std::string(kVersion))
           .Set("host", host)
           .Set("nnodes", fmt::format("{}:{}", config.min_nodes, config.max_nodes))
           .Set("nproc_per_node", config.nproc_per_node)
           .Set("max_restarts", config.max_restarts)
           .Set("entrypoint", config.script));
}

void AgentEvents::RoundStarted(const rendezvous::NodeAssignment& a) {
  EmitForRound(EventLog::Event("round_started")
                   .Set("restart_count", a.restart_count)
                   .Set("group_rank", a.group_rank)
                   .Set("group_world_size", a.group_world_size)
                   .Set("world_size", a.world_size)
                   .Set("base_rank", a.base_rank)
                   .Set("master", fmt::format("{}:{}", a.master_addr, a.master_port)),
               a.round);
}

void AgentEvents::WorkersSpawned(const WorkerGroup& group) {
  std::vector<int> ranks, pids;
  for (const auto& w : group.workers()) {
    if (w.local_rank < 0) continue;
    pids.push_back(w.process->pid());
    ranks.push_back(w.rank);
  }
  Emit(EventLog::Event("workers_spawned")
           .Set("attempt", group.assignment().restart_count)
           .Set("ranks", ranks)
           .Set("pids", pids));
  AttemptStarted(group.assignment().restart_count);
}

void AgentEvents::AttemptStarted(int attempt) {
  attempt_ = attempt;
  first_step_seen_ = false;
  update_seen_ = false;
  resumed_step_.reset();
  restore_seen_ = false;
}

void AgentEvents::WorkerExited(const WorkerGroup::Worker& w, const std::string& outcome) {
  Emit(EventLog::Event("worker_exited")
           .Set("local_rank", w.local_rank)
           .Set("rank", w.rank)
           .Set("pid", static_cast<int>(w.process->pid()))
           .Set("exitcode", w.status->TorchExitCode())
           .Set("status", w.status->Describe())
           .Set("outcome", outcome));
}

void AgentEvents::FaultReported(const WorkerFailure& failure) {
  Emit(EventLog::Event("fault_reported")
           .Set("rank", failure.rank)
           .Set("local_rank", failure.local_rank)
           .Set("exitcode", failure.exitcode)
           .Set("message", failure.message.substr(0, failure.message.find('\n'))));
}

void AgentEvents::FaultDetected(const std::string& kind, const WorkerFailure* failure,
                                const std::string& why, int64_t step, int64_t snapshot_step,
                                int64_t detect_ms) {
  auto m = EventLog::Event("fault_detected").Set("kind", kind);
  if (failure) {
    m.Set("rank", failure->rank).Set("local_rank", failure->local_rank).Set("host", failure->host);
    if (failure->exitcode < 0) {
      m.Set("signal", SignalName(-failure->exitcode));
    } else {
      m.Set("exitcode", failure->exitcode);
    }
  }
  if (!why.empty()) m.Set("why", why.substr(0, 512));
  m.Set("step", step).Set("snapshot_step", snapshot_step).Set("detect_ms", detect_ms);
  Emit(std::move(m));
}

void AgentEvents::FaultSaveDone(const std::string& how) {
  Emit(EventLog::Event("fault_save_done").Set("how", how));
}

void AgentEvents::WorkersStopping(int sig, int attempt) {
  Emit(EventLog::Event("workers_stopping").Set("signal", SignalName(sig)).Set("attempt", attempt));
}

void AgentEvents::WorkersStopped(int attempt) {
  Emit(EventLog::Event("workers_stopped").Set("attempt", attempt));
}

void AgentEvents::Progress(int local_rank, int64_t step, bool updating) {
  if (first_step_seen_) return;
  if (updating) {
    update_seen_ = true;
    return;
  }
  if (!update_seen_ && !resumed_step_) {
    resumed_step_ = step;
    return;
  }
  if (resumed_step_ ? step <= *resumed_step_ : !update_seen_) return;
  first_step_seen_ = true;
  Emit(EventLog::Event("first_step")
           .Set("attempt", attempt_)
           .Set("local_rank", local_rank)
           .Set("step", step)
           .Set("resumed_from", resumed_step_.value_or(-1)));
}

void AgentEvents::CheckpointTaken(int local_rank, int64_t step) {
  if (local_rank != 0) return;
  const auto now = std::chrono::steady_clock::now();
  if (last_checkpoint_record_ && now - *last_checkpoint_record_ < kCheckpointRecordInterval) return;
  last_checkpoint_record_ = now;
  Emit(EventLog::Event("checkpoint_taken").Set("where", "memory").Set("step", step));
}

void AgentEvents::CheckpointRestored(int local_rank, int64_t step) {
  if (restore_seen_) return;
  restore_seen_ = true;
  Emit(EventLog::Event("checkpoint_restored")
           .Set("where", "memory")
           .Set("local_rank", local_rank)
           .Set("step", step));
}

void AgentEvents::RoundStopping(uint64_t round, const std::string& reason, int restart_count) {
  EmitForRound(EventLog::Event("restart").Set("reason", reason).Set("restart_count", restart_count),
               round);
}

void AgentEvents::Signal(int sig) {
  Emit(EventLog::Event("signal").Set("signal", SignalName(sig)));
}

void AgentEvents::NodeExcluded(const std::string& why) {
  Emit(EventLog::Event("node_excluded").Set("why", why));
}

void AgentEvents::JobFinished(bool succeeded, int exit_code, const std::string& reason) {
  Emit(EventLog::Event("job_finished")
           .Set("outcome", std::string(succeeded ? "succeeded" : "failed"))
           .Set("exit_code", exit_code)
           .Set("reason", reason));
}

void AgentEvents::Emit(JsonMessage record) {
  if (log_) log_->Write(std::move(record), round_);
}

void AgentEvents::EmitForRound(JsonMessage record, uint64_t round) {
  if (log_) log_->Write(std::move(record), round);
}

void AgentEvents::EmitUntagged(JsonMessage record) {
  if (log_) log_->Write(std::move(record));
}

}  // namespace ftrun::launcher
