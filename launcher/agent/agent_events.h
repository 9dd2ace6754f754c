// AgentEvents: the agent's records in the event log (--event-log; schema in ftrun(1) EVENT
// LOG). The agent and its collaborators state facts (a round started, a worker exited, ...);
// this class turns each into its record and tags it with the round whose workers run.
//
// A recovery is told as one record per boundary, so `ftrun report` can split its time into
// detect / save / stop / rendezvous / spawn / first step: fault_detected, fault_save_done,
// workers_stopping, workers_stopped, round_started, workers_spawned, first_step.
//
// Thread: loop only. Ownership: shares the EventLog (null: nothing is written).
#pragma once

#include <chrono>
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

inline constexpr std::chrono::seconds kCheckpointRecordInterval{10};

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
  // The moment this node learnt of a fault. `kind`: "exit" (a worker died), "hang" (the hang
  // detector), or "elsewhere" (the job stops the round for another node's fault or a
  // membership change; then `failure` is null and `why` says what). `step`, `snapshot_step`:
  // the newest step the local ranks completed and hold in memory (-1: none). `detect_ms`: how
  // long the fault went unseen (a hang: the silence; 0 otherwise).
  void FaultDetected(const std::string& kind, const WorkerFailure* failure, const std::string& why,
                     int64_t step, int64_t snapshot_step, int64_t detect_ms);
  // The survivors were held for the fault-time save (or MindIO's grace) and that is over:
  // `how` says why ("stop ordered", "grace over", "no stop order", ...).
  void FaultSaveDone(const std::string& how);
  // The agent signals the group to stop, and later every process of it has exited.
  void WorkersStopping(int sig, int attempt);
  void WorkersStopped(int attempt);
  // A local rank's progress report (control channel). The first step completed in each
  // attempt becomes a first_step record: the first report of a completed step (`updating`
  // false) after an update began, or beyond the step of the attempt's first report when that
  // one reported a state already complete (a resumed script reports the step it restored).
  // Plain scripts never report, and then no record says anything.
  void Progress(int local_rank, int64_t step, bool updating);
  // A new attempt's workers run (WorkersSpawned calls it): its first step is still to come.
  void AttemptStarted(int attempt);
  // Memory snapshots (flash checkpoint): taken (local rank 0's, at most one record per
  // kCheckpointRecordInterval, the newest also in fault_detected) and restored (the first
  // request of each attempt).
  void CheckpointTaken(int local_rank, int64_t step);
  void CheckpointRestored(int local_rank, int64_t step);
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
  int attempt_ = -1;                     // of the last workers_spawned
  bool first_step_seen_ = true;          // until the next workers_spawned
  bool update_seen_ = false;             // in this attempt
  std::optional<int64_t> resumed_step_;  // the attempt's first report, if of a complete state
  bool restore_seen_ = true;
  std::optional<std::chrono::steady_clock::time_point> last_checkpoint_record_;
};

}  // namespace ftrun::launcher
