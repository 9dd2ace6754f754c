// AgentEvents: the agent's records in the event log (--event-log; schema in ftrun(1) EVENT
// LOG). The agent and its collaborators state facts (a round started, a worker exited, ...);
// this class turns each into its record and tags it with the round whose workers run.
//
// Thread: loop only. Ownership: shares the EventLog (null: nothing is written).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "common/event_log.h"
#include "common/json_message.h"
#include "launcher/config/launch_config.h"
#include "launcher/workers/failure_report.h"
#include "launcher/workers/worker_group.h"
#include "rendezvous/assignment.h"

namespace ftrun::launcher {

class AgentEvents {
 public:
  explicit AgentEvents(std::shared_ptr<EventLog> log) : log_(std::move(log)) {}

  // The round whose workers run (nullopt between rounds): records are tagged with it.
  void SetRound(std::optional<uint64_t> round) { round_ = round; }

  void AgentStarted(const LaunchConfig& config, const std::string& host);
  void RoundStarted(const rendezvous::NodeAssignment& a);
  void WorkersSpawned(const WorkerGroup& group);
  // `outcome`: "succeeded", "failed" or "stopped" (by the agent).
  void WorkerExited(const WorkerGroup::Worker& w, const std::string& outcome);
  void FaultReported(const WorkerFailure& failure);
  void RoundStopping(uint64_t round, const std::string& reason, int restart_count);
  void Signal(int sig);
  void NodeExcluded(const std::string& why);
  void JobFinished(bool succeeded, int exit_code, const std::string& reason);

  // Any other record (the save relay's and pre-flight's own), tagged with the running round.
  void Emit(JsonMessage record);
  // As Emit, for a record that carries its own context (a network check's results).
  void EmitUntagged(JsonMessage record);

 private:
  void EmitForRound(JsonMessage record, uint64_t round);

  std::shared_ptr<EventLog> log_;
  std::optional<uint64_t> round_;
};

}  // namespace ftrun::launcher
