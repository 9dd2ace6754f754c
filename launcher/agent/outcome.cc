#include "launcher/agent/outcome.h"

#include <iostream>

#include "common/log.h"
#include "launcher/workers/failure_report.h"

namespace ftrun::launcher {

void ReportOutcome(const JobResult& r, int exit_code, WorkerPlanner& planner,
                   const EnvMap& agent_env, AgentEvents& events) {
  const bool succeeded = r.succeeded && exit_code == 0;
  events.JobFinished(succeeded, exit_code, r.reason);
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
