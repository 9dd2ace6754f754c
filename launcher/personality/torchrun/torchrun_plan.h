// TorchrunPlanner: torchrun's workers. Command (<python> -u script args, -m, --no-python,
// --run-path, ${local_rank} substitution), environment (worker_env.h), and log layout
// (log_dir.h: redirects, tee with the [role<rank>]: prefix, --local-ranks-filter,
// duplicate filters, error.json).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "launcher/config/launch_config.h"
#include "launcher/workers/log_dir.h"
#include "launcher/workers/worker_plan.h"

namespace ftrun::launcher {

// Program and arguments of one worker, after ${local_rank} substitution.
struct WorkerCommand {
  std::string program;
  std::vector<std::string> args;
};
WorkerCommand BuildWorkerCommand(const LaunchConfig& config, int local_rank);

class TorchrunPlanner : public WorkerPlanner {
 public:
  // `config` must outlive the planner.
  TorchrunPlanner(const LaunchConfig& config, EnvMap agent_env, RunLogDir log_dir);

  Result<std::string> PrepareLogs(const rendezvous::NodeAssignment& a) override;
  std::vector<ProcessPlan> Plan(const rendezvous::NodeAssignment& a,
                                const EnvMap& extra_env) override;
  std::string EntrypointName() const override { return config_.script; }

 private:
  StreamPlan Stream(int local_rank, int rank, bool is_out, int redirect, int tee) const;

  const LaunchConfig& config_;
  EnvMap agent_env_;
  RunLogDir log_dir_;
  std::string attempt_dir_;
  std::shared_ptr<SharedFile> filtered_stdout_;
  std::shared_ptr<SharedFile> filtered_stderr_;
};

}  // namespace ftrun::launcher
