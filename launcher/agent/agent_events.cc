#include "launcher/agent/agent_events.h"

#include <fmt/format.h>

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
