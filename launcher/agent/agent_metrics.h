// AgentMetrics: the agent's Prometheus metrics (--metrics-port; the names in ftrun(1)
// METRICS). The agent and its collaborators state facts; this class keeps the counters,
// measures the time to recover with the injected clock, and serves them.
//
// Thread: loop only. Ownership: owns the metrics server; borrows the config and the clock
// (they outlive it). Errors: StartMetrics names the port it could not bind.
#pragma once

#include <boost/asio/io_context.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/clock.h"
#include "common/metrics_server.h"
#include "common/result.h"
#include "launcher/config/launch_config.h"
#include "rendezvous/assignment.h"

namespace ftrun::launcher {

class AgentMetrics {
 public:
  // `live_workers` counts the running processes; `server_metrics` is a hosted rendezvous
  // server's text ("" when none).
  AgentMetrics(boost::asio::io_context& io, const LaunchConfig& config, Clock& clock,
               std::function<size_t()> live_workers, std::function<std::string()> server_metrics);
  ~AgentMetrics();

  // Serves the metrics on `port` (0: any); logs the address with `host`.
  Status Start(int port, const std::string& host);
  void Stop();

  void RoundStarted(const rendezvous::NodeAssignment& a);
  void WorkerFailed(int64_t timestamp);
  void StopAsked();  // a stop without a local fault starts the recovery clock too
  // A rank answered a fault-time save order, `seconds` after it (-1: unknown).
  void SaveAcknowledged(bool ok, double seconds);

  std::string Render() const;

 private:
  boost::asio::io_context& io_;
  const LaunchConfig& config_;
  Clock& clock_;
  std::unique_ptr<MetricsServer> server_;
  std::function<size_t()> live_workers_;
  std::function<std::string()> server_metrics_;
  int rounds_ = 0;
  int restart_count_ = 0;
  int worker_failures_ = 0;
  int members_ = 0;
  int world_size_ = 0;
  double last_fault_time_ = 0;   // seconds since the epoch
  double time_to_recover_ = -1;  // last fault -> next round's workers started, seconds
  std::optional<Clock::TimePoint> fault_at_;
  int saves_ok_ = 0;
  int saves_failed_ = 0;
  double last_save_duration_ = -1;  // order -> acknowledgement, seconds
};

}  // namespace ftrun::launcher
