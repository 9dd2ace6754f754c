#include "launcher/agent/agent_report.h"

#include <fmt/format.h>

#include <iostream>

#include "common/log.h"
#include "common/version.h"
#include "launcher/workers/failure_report.h"

namespace ftrun::launcher {

AgentReport::AgentReport(boost::asio::io_context& io, const LaunchConfig& config, Clock& clock,
                         std::shared_ptr<EventLog> events, std::function<size_t()> live_workers,
                         std::function<std::string()> server_metrics)
    : io_(io),
      config_(config),
      clock_(clock),
      events_(std::move(events)),
      live_workers_(std::move(live_workers)),
      server_metrics_(std::move(server_metrics)) {}

AgentReport::~AgentReport() { Stop(); }

Status AgentReport::StartMetrics(int port, const std::string& host) {
  server_ = std::make_unique<MetricsServer>(io_, [this] { return RenderMetrics(); });
  auto bound = server_->Start(port);
  if (!bound) return bound.error();
  LauncherLog()->info("metrics at http://{}:{}/metrics", host, *bound);
  return {};
}

void AgentReport::Stop() {
  if (server_) server_->Stop();
}

void AgentReport::Emit(JsonMessage record) {
  if (events_) events_->Write(std::move(record), round_);
}

void AgentReport::EmitForRound(JsonMessage record, uint64_t round) {
  if (events_) events_->Write(std::move(record), round);
}

void AgentReport::EmitUntagged(JsonMessage record) {
  if (events_) events_->Write(std::move(record));
}

void AgentReport::RoundStarted(const rendezvous::NodeAssignment& a) {
  ++rounds_;
  restart_count_ = a.restart_count;
  members_ = a.group_world_size;
  world_size_ = a.world_size;
  if (fault_at_) {
    time_to_recover_ = std::chrono::duration<double>(clock_.Now() - *fault_at_).count();
    fault_at_.reset();
  }
}

void AgentReport::WorkerFailed(int64_t timestamp) {
  ++worker_failures_;
  last_fault_time_ = static_cast<double>(timestamp);
  if (!fault_at_) fault_at_ = clock_.Now();
}

void AgentReport::StopAsked() {
  if (!fault_at_) fault_at_ = clock_.Now();
}

std::string AgentReport::RenderMetrics() const {
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
      fmt::format("ftrun_saves_total{{outcome=\"saved\"}} {}\n", saves_.ok) +
      fmt::format("ftrun_saves_total{{outcome=\"failed\"}} {}\n", saves_.failed);
  out += PromMetric("ftrun_last_save_duration_seconds", "gauge",
                    "Last fault-time save, order to acknowledgement (-1: none yet).",
                    saves_.last_duration);
  out += PromMetric("ftrun_rendezvous_members", "gauge", "Nodes in the current round.", members_);
  out += PromMetric("ftrun_world_size", "gauge", "Workers in the current round.", world_size_);
  return out + server_metrics_();
}

void AgentReport::Outcome(const JobResult& r, int exit_code, WorkerPlanner& planner,
                          const EnvMap& agent_env) {
  const bool succeeded = r.succeeded && exit_code == 0;
  Emit(EventLog::Event("job_finished")
           .Set("outcome", std::string(succeeded ? "succeeded" : "failed"))
           .Set("exit_code", exit_code)
           .Set("reason", r.reason));
  if (succeeded) {
    LauncherLog()->info("job finished outcome=succeeded exit_code=0");
    return;
  }
  LauncherLog()->error("job finished outcome=failed exit_code={} reason=\"{}\"", exit_code,
                       r.reason);
  if (r.failures.empty()) return;
  planner.ReportFailure(r.failures, std::cerr);
  if (auto path = Lookup(agent_env, "TORCHELASTIC_ERROR_FILE")) {
    const WorkerFailure& root = r.failures[RootCauseIndex(r.failures)];
    if (auto s = WriteAgentErrorFile(*path, root); !s) LauncherLog()->warn("{}", s.error().message);
  }
}

}  // namespace ftrun::launcher
