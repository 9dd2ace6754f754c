// AgentReport: what the agent tells operators — the event log (--event-log), the Prometheus
// metrics (--metrics-port) and the job's outcome (log line, torchrun's failure summary on
// stderr, TORCHELASTIC_ERROR_FILE). The agent feeds it facts; it keeps the counters.
//
// Thread: loop only. Ownership: owns the metrics server; borrows the config, the planner
// and the clock, which outlive it.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "common/clock.h"
#include "common/environment.h"
#include "common/event_log.h"
#include "common/json_message.h"
#include "common/metrics_server.h"
#include "launcher/config/launch_config.h"
#include "launcher/coordinator/coordinator.h"
#include "launcher/workers/worker_plan.h"
#include "rendezvous/assignment.h"

namespace ftrun::launcher {

// The fault-time saves of this node's ranks, as --metrics-port shows them.
struct SaveMetrics {
  int ok = 0;
  int failed = 0;
  double last_duration = -1;  // order -> acknowledgement, seconds
};

class AgentReport {
 public:
  // `live_workers` counts the running processes; `server_metrics` is a hosted rendezvous
  // server's text ("" when none).
  AgentReport(boost::asio::io_context& io, const LaunchConfig& config, Clock& clock,
              std::shared_ptr<EventLog> events, std::function<size_t()> live_workers,
              std::function<std::string()> server_metrics);
  ~AgentReport();

  // Serves --metrics-port.
  Status StartMetrics(int port, const std::string& host);
  void Stop();

  // One event-log record, tagged with the round whose workers run (if any).
  void Emit(JsonMessage record);
  // As Emit, for a record about `round` even when no workers run.
  void EmitForRound(JsonMessage record, uint64_t round);
  // As Emit, for a record that carries its own context (a network check's results).
  void EmitUntagged(JsonMessage record);
  void SetRound(std::optional<uint64_t> round) { round_ = round; }

  // Facts for the metrics.
  void RoundStarted(const rendezvous::NodeAssignment& a);
  void WorkerFailed(int64_t timestamp);
  void StopAsked();  // a stop without a local fault starts the recovery clock too
  SaveMetrics& saves() { return saves_; }

  std::string RenderMetrics() const;

  // The job's outcome: a record, a log line, and on failure the planner's summary on stderr
  // and the root cause in TORCHELASTIC_ERROR_FILE (from `agent_env`).
  void Outcome(const JobResult& r, int exit_code, WorkerPlanner& planner, const EnvMap& agent_env);

 private:
  boost::asio::io_context& io_;
  const LaunchConfig& config_;
  Clock& clock_;
  std::shared_ptr<EventLog> events_;
  std::unique_ptr<MetricsServer> server_;
  std::function<size_t()> live_workers_;
  std::function<std::string()> server_metrics_;
  std::optional<uint64_t> round_;
  int rounds_ = 0;
  int restart_count_ = 0;
  int worker_failures_ = 0;
  int members_ = 0;
  int world_size_ = 0;
  double last_fault_time_ = 0;   // seconds since the epoch
  double time_to_recover_ = -1;  // last fault -> next round's workers started, seconds
  std::optional<Clock::TimePoint> fault_at_;
  SaveMetrics saves_;
};

}  // namespace ftrun::launcher
