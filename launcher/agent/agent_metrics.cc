// Agent, continued: what it tells operators (the event log and --metrics-port).
#include <fmt/format.h>

#include "launcher/agent/agent.h"
#include "common/version.h"

namespace ftrun::launcher {


void Agent::Emit(JsonMessage record) {
  if (!opts_.events) return;
  std::optional<uint64_t> round;
  if (group_) round = group_->assignment().round;
  opts_.events->Write(std::move(record), round);
}

std::string Agent::RenderMetrics() const {
  const AgentMetrics& m = metrics_;
  std::string out = PromMetric("ftrun_info", "gauge", "This agent (value always 1).", 1,
                               fmt::format("version=\"{}\",run_id=\"{}\"", kVersion,
                                           config_.run_id));
  out += PromMetric("ftrun_restarts", "gauge", "Job-wide restarts so far.", m.restart_count);
  out += PromMetric("ftrun_rounds_total", "counter", "Rounds this agent started workers for.",
                    m.rounds);
  out += PromMetric("ftrun_workers_live", "gauge", "Worker processes running now.",
                    group_ ? static_cast<double>(group_->live_count()) : 0);
  out += PromMetric("ftrun_worker_failures_total", "counter",
                    "Workers of this node that failed or hung.", m.worker_failures);
  out += PromMetric("ftrun_last_fault_timestamp_seconds", "gauge",
                    "When this node last saw a worker fail (0: never).", m.last_fault_time);
  out += PromMetric("ftrun_time_to_recover_seconds", "gauge",
                    "Last fault to the next round's workers running (-1: none yet).",
                    m.time_to_recover);
  out += "# HELP ftrun_saves_total Fault-time saves by this node's ranks.\n"
         "# TYPE ftrun_saves_total counter\n" +
         fmt::format("ftrun_saves_total{{outcome=\"saved\"}} {}\n", m.saves_ok) +
         fmt::format("ftrun_saves_total{{outcome=\"failed\"}} {}\n", m.saves_failed);
  out += PromMetric("ftrun_last_save_duration_seconds", "gauge",
                    "Last fault-time save, order to acknowledgement (-1: none yet).",
                    m.last_save_duration);
  out += PromMetric("ftrun_rendezvous_members", "gauge", "Nodes in the current round.",
                    m.members);
  out += PromMetric("ftrun_world_size", "gauge", "Workers in the current round.", m.world_size);
  return out + coordinator_->ServerMetrics();
}

}  // namespace ftrun::launcher
