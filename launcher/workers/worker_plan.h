// How the processes of one node's worker group are started, decided per personality (torchrun,
// msrun): what runs, with which environment, and where its output goes. WorkerGroup executes
// a plan; a WorkerPlanner makes one for each round.
#pragma once

#include <sys/types.h>

#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "common/environment.h"
#include "common/result.h"
#include "launcher/workers/failure_report.h"
#include "launcher/workers/output_tee.h"
#include "rendezvous/assignment.h"

namespace ftrun::launcher {

struct StreamPlan {
  enum class Kind { kInherit, kFile, kTee };
  Kind kind = Kind::kInherit;
  std::string file;     // kFile: where it goes ("/dev/null" discards); kTee: its log file or ""
  bool append = false;  // kFile
  TeeOptions tee;       // kTee: console, prefix, duplicate filters (tee.log_file = file)
};

struct ProcessPlan {
  std::string program;  // a path, or a name looked up in env's PATH
  std::vector<std::string> args;
  EnvMap env;
  StreamPlan out;
  StreamPlan err;
  bool err_to_out = false;  // stderr into the same place as stdout
  int local_rank = -1;      // -1: an auxiliary process (msrun's scheduler), not a rank
  int rank = -1;            // global rank
  std::string error_file;   // torch's @record error file, "" when none
  std::string name;         // for logs, e.g. "scheduler"
};

// Thread: loop only.
class WorkerPlanner {
 public:
  virtual ~WorkerPlanner() = default;
  // Prepares this round's log location; returns it for the logs ("" when there is none).
  virtual Result<std::string> PrepareLogs(const rendezvous::NodeAssignment& a) = 0;
  // This node's processes for the round: its workers in local-rank order, then any auxiliary
  // process. `extra_env` (FTRUN_* variables) is added to every process.
  virtual std::vector<ProcessPlan> Plan(const rendezvous::NodeAssignment& a,
                                        const EnvMap& extra_env) = 0;
  // The name in the failure summary's "<name> FAILED".
  virtual std::string EntrypointName() const = 0;
  // A process of the running round failed (`local_rank` -1: an auxiliary one): a log line in
  // the personality's own words, if it has one.
  virtual void OnProcessFailed(pid_t /*pid*/, int /*local_rank*/, int /*exitcode*/) {}
  // The job failed: its report on `err`. torchrun's is the ChildFailedError summary.
  virtual void ReportFailure(const std::vector<WorkerFailure>& failures, std::ostream& err) {
    err << "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: "
        << FormatFailureSummary(EntrypointName(), failures) << std::endl;
  }
};

}  // namespace ftrun::launcher
