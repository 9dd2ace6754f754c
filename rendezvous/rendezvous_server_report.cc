// RendezvousServer, continued: what it tells operators (logs, the event log, metrics).
#include <fmt/format.h>

#include <algorithm>
#include <variant>

#include "common/log.h"
#include "common/metrics_server.h"
#include "rendezvous/credentials.h"
#include "rendezvous/rendezvous_server.h"
#include "rendezvous/rendezvous_server_call.h"

namespace ftrun::rendezvous {

std::string RendezvousServer::RenderMetrics() const {
  NodeView v = state_.View("");
  std::string out;
  out += PromMetric("ftrun_rendezvous_nodes", "gauge", "Nodes that joined the job.",
                    static_cast<double>(state_.node_count()));
  out += PromMetric("ftrun_rendezvous_round", "gauge", "The current rendezvous round.",
                    static_cast<double>(state_.round()));
  out += PromMetric("ftrun_rendezvous_round_nodes", "gauge", "Nodes in the current round.",
                    v.nodes_joined);
  out += PromMetric("ftrun_rendezvous_waiting_nodes", "gauge",
                    "Joined nodes outside the round waiting for a whole --node-unit (not spares).",
                    v.nodes_waiting - v.nodes_spare);
  out += PromMetric("ftrun_rendezvous_spare_nodes", "gauge",
                    "Joined nodes beyond --nnodes MAX, waiting to take a lost node's place.",
                    v.nodes_spare);
  out += PromMetric("ftrun_rendezvous_restarts", "gauge", "Job-wide restarts so far.",
                    v.restart_count);
  out += PromMetric("ftrun_rendezvous_rejected_calls_total", "counter",
                    "Calls refused (token, credentials, limits, mismatches).",
                    static_cast<double>(rejected_total_));
  out += PromMetric("ftrun_rendezvous_pending_watches", "gauge", "Watch calls held open.",
                    static_cast<double>(watches_.size()));
  out +=
      "# HELP ftrun_rendezvous_phase The job's phase (1 for the current one).\n"
      "# TYPE ftrun_rendezvous_phase gauge\n";
  for (Phase p : {Phase::kForming, Phase::kChecking, Phase::kRunning, Phase::kSaving,
                  Phase::kStopping, Phase::kSucceeded, Phase::kFailed}) {
    out += fmt::format("ftrun_rendezvous_phase{{phase=\"{}\"}} {}\n", PhaseName(p),
                       p == state_.phase() ? 1 : 0);
  }
  return out;
}

void RendezvousServer::LogTransitions() { transitions_.Log(state_); }

}  // namespace ftrun::rendezvous
