// The part of every personality after its command line is understood: the event log, the
// coordinator for the job's shape, the worker planner, and the agent until the job ends.
// Returns the process exit code (1 for start-up failures, each logged in one line).
#pragma once

#include <functional>
#include <future>
#include <memory>
#include <ostream>
#include <string>

#include "common/environment.h"
#include "common/result.h"
#include "launcher/config/launch_config.h"
#include "launcher/workers/worker_plan.h"

namespace ftrun::launcher {

struct JobHooks {
  // The personality's planner, made once the coordinator exists: `hosts_rendezvous` tells
  // whether this agent serves the rendezvous (msrun starts its scheduler there).
  std::function<Result<std::unique_ptr<WorkerPlanner>>(bool hosts_rendezvous)> make_planner;
  // The exit code after a forwarded signal stopped the job (default: 1).
  std::function<int(int sig)> signal_exit_code;
  // Called once when start-up is over: the first workers started (single node) or the
  // agent waits for its first round (several nodes).
  std::function<void()> on_ready;
  // Called once, when this node's first workers have started (whatever the job's shape).
  std::function<void()> on_workers_started;
  std::string watchdog_fifo;  // torch's FileTimerClient FIFO ("" = off)
  std::string stacks_dir;     // merged stacks (AgentOptions::stacks_dir)
  // Host the workers' c10d store in the agent (launcher/agent/agent_store.h); msrun's workers
  // use none.
  bool agent_store = true;
  // The run's log directory ("" : none, e.g. --log-dir /dev/null): without --event-log the
  // event log is <run_dir>/events.jsonl, and after a job with faults the post-mortem page
  // (`ftrun report`) is written there as report.html.
  std::string run_dir;
};

// --dry-run's common lines (nodes, workers, rendezvous, restarts, fault tolerance,
// operations). `nproc_note`: why --nproc-per-node could not be resolved here, or "".
void PrintDryRunSummary(const LaunchConfig& config, const std::string& nproc_note,
                        std::ostream& out);

// `env` is the agent's environment (workers inherit it); `host` resolves to this host's FQDN.
int RunJob(const LaunchConfig& config, EnvMap env, std::shared_future<std::string> host,
           JobHooks hooks);

}  // namespace ftrun::launcher
