// MsrunPlanner: msrun's processes for one round, with msrun's environment (MS_ROLE,
// MS_WORKER_NUM, MS_SCHED_HOST/PORT, MS_TOPO_TIMEOUT, MS_NODE_ID, MS_NODE_RANK, RANK_ID,
// RANK_SIZE, DEVICE_ID, RANK_TABLE_FILE, MSRUN_CPU_LIST) and its logs: <log_dir>/scheduler.log
// and <log_dir>/<worker_log_name>_<rank>.log, stdout and stderr merged, truncated when the job
// starts and appended to on a restart. The scheduler (the same command with MS_ROLE=MS_SCHED)
// runs on the master node only, as an auxiliary process after the workers. With --join True
// the selected workers' logs are also copied to the console, as msrun's `tail -f` does.
//
// Thread: loop only. `config` must outlive the planner.
#pragma once

#include <string>
#include <vector>

#include "launcher/personality/msrun/msrun_config.h"
#include "launcher/workers/worker_plan.h"

namespace ftrun::launcher {

class MsrunPlanner : public WorkerPlanner {
 public:
  // `sched_host`: MS_SCHED_HOST (the master's IPv4 address). `runs_scheduler`: this node
  // starts the scheduler. `log_base`: the worker log base name, {ip}/{hostname} replaced.
  MsrunPlanner(const MsrunConfig& config, EnvMap agent_env, std::string sched_host,
               bool runs_scheduler, std::string log_base);

  Result<std::string> PrepareLogs(const rendezvous::NodeAssignment& a) override;
  std::vector<ProcessPlan> Plan(const rendezvous::NodeAssignment& a,
                                const EnvMap& extra_env) override;
  std::string EntrypointName() const override;
  // msrun's words: "Worker process <pid> exit with exception. Error code: <n>."
  void OnProcessFailed(pid_t pid, int local_rank, int exitcode) override;
  // msrun's report: the error lines of scheduler.log with 5 lines of context, then
  // "RuntimeError: Distributed job exited with exception. Please check logs in directory: ..."
  void ReportFailure(const std::vector<WorkerFailure>& failures, std::ostream& err) override;

  // <log_dir>/<name> ("<name>" when --log_dir is empty).
  std::string LogPath(const std::string& name) const;
  // The worker's global rank in MS_NODE_ID/RANK_ID, or -1 where msrun leaves it to MindSpore
  // (simulation on several nodes' worth of ranks without --node_rank).
  int NodeId(const rendezvous::NodeAssignment& a, int local_index) const;
  // The worker's log file.
  std::string WorkerLog(const rendezvous::NodeAssignment& a, int local_index) const;

 private:
  EnvMap CommonEnv() const;
  std::vector<std::string> Command(int local_index) const;
  StreamPlan Output(const std::string& file, bool console) const;

  const MsrunConfig& config_;
  EnvMap agent_env_;
  std::string sched_host_;
  bool runs_scheduler_;
  std::string log_base_;
  bool started_once_ = false;  // logs are truncated for the first round only
  bool warned_ = false;        // the first round's warnings are given
};

}  // namespace ftrun::launcher
