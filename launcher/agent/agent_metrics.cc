#include "launcher/agent/agent_metrics.h"

#include <fmt/format.h>

#include "common/log.h"
#include "common/version.h"
#include "launcher/workers/console_writer.h"

namespace ftrun::launcher {

AgentMetrics::AgentMetrics(boost::asio::io_context& io, const LaunchConfig& config, Clock& clock,
                           std::function<size_t()> live_workers,
                           std::function<std::string()> server_metrics)
    : io_(io),
      config_(config),
      clock_(clock),
      live_workers_(std::move(live_workers)),
      server_metrics_(std::move(server_metrics)) {}

AgentMetrics::~AgentMetrics() { Stop(); }

Status AgentMetrics::Start(int port, const std::string& host) {
  server_ = std::make_unique<MetricsServer>(io_, [this] { return Render(); });
  auto bound = server_->Start(port);
  if (!bound) return bound.error();
  LauncherLog()->info("metrics at http://{}:{}/metrics", host, *bound);
  return {};
}

void AgentMetrics::Stop() {
  if (server_) server_->Stop();
}

void AgentMetrics::RoundStarted(const rendezvous::NodeAssignment& a) {
  ++rounds_;
  restart_count_ = a.restart_count;
  members_ = a.group_world_size;
  world_size_ = a.world_size;
  if (fault_at_) {
    time_to_recover_ = std::chrono::duration<double>(clock_.Now() - *fault_at_).count();
    fault_at_.reset();
  }
}

void AgentMetrics::WorkerFailed(int64_t timestamp) {
  ++worker_failures_;
  last_fault_time_ = static_cast<double>(timestamp);
  if (!fault_at_) fault_at_ = clock_.Now();
}

void AgentMetrics::StopAsked() {
  if (!fault_at_) fault_at_ = clock_.Now();
}

void AgentMetrics::SaveAcknowledged(bool ok, double seconds) {
  (ok ? saves_ok_ : saves_failed_)++;
  last_save_duration_ = seconds;
}

std::string AgentMetrics::Render() const {
  std::string out =
      PromMetric("ftrun_info", "gauge", "This agent (value always 1).", 1,
                 fmt::format("version=\"{}\",run_id=\"{}\"", kVersion, config_.run_id));
  out += PromMetric("ftrun_restarts", "gauge", "Job-wide restarts so far.", restart_count_);
  out += PromMetric("ftrun_rounds_total", "counter", "Rounds this agent started workers for.",
                    rounds_);
  out += PromMetric("ftrun_workers_live", "gauge", "Worker processes running now.",
                    static_cast<double>(live_workers_()));
  out += PromMetric("ftrun_worker_failures_total", "counter",
                    "Workers of this node that failed or hung.", worker_failures_);
  out += PromMetric("ftrun_last_fault_timestamp_seconds", "gauge",
                    "When this node last saw a worker fail (0: never).", last_fault_time_);
  out += PromMetric("ftrun_time_to_recover_seconds", "gauge",
                    "Last fault to the next round's workers running (-1: none yet).",
                    time_to_recover_);
  out +=
      "# HELP ftrun_saves_total Fault-time saves by this node's ranks.\n"
      "# TYPE ftrun_saves_total counter\n" +
      fmt::format("ftrun_saves_total{{outcome=\"saved\"}} {}\n", saves_ok_) +
      fmt::format("ftrun_saves_total{{outcome=\"failed\"}} {}\n", saves_failed_);
  out += PromMetric("ftrun_last_save_duration_seconds", "gauge",
                    "Last fault-time save, order to acknowledgement (-1: none yet).",
                    last_save_duration_);
  out += PromMetric("ftrun_rendezvous_members", "gauge", "Nodes in the current round.", members_);
  out += PromMetric("ftrun_world_size", "gauge", "Workers in the current round.", world_size_);
  const ConsoleDrops dropped = TotalConsoleDrops();
  out += PromMetric("ftrun_console_dropped_bytes_total", "counter",
                    "Tee'd worker output dropped because ftrun's console was not read.",
                    static_cast<double>(dropped.bytes));
  out += PromMetric("ftrun_console_dropped_lines_total", "counter",
                    "Tee'd worker lines dropped because ftrun's console was not read.",
                    static_cast<double>(dropped.lines));
  return out + server_metrics_();
}

}  // namespace ftrun::launcher
