// The job's outcome as this node reports it when it is over: an event-log record, a log
// line, and on failure the planner's failure summary on stderr (torchrun's table) and the
// root cause in TORCHELASTIC_ERROR_FILE (taken from `agent_env`). Errors writing the file
// are logged, never fatal. Thread: loop only.
#pragma once

#include <filesystem>
#include <string>

#include "common/environment.h"
#include "launcher/agent/agent_events.h"
#include "launcher/coordinator/coordinator.h"
#include "launcher/workers/worker_plan.h"

namespace ftrun::launcher {

// Writes the fault record (fault_record.h) to `path` atomically; a failure is logged.
void WriteFaultRecord(const std::filesystem::path& path, const std::string& json);

// Logs and records how the job ended and writes the agent's error file. Returns the failure
// report for the console ("" when there is none), which WriteFailureReport prints once the
// loop has stopped.
std::string ReportOutcome(const JobResult& r, int exit_code, WorkerPlanner& planner,
                          const EnvMap& agent_env, AgentEvents& events);

// Writes `report` to stderr, waiting at most a few seconds for a reader that does not take
// it (it is also in the fault record and the error file). Blocks: never on the loop.
void WriteFailureReport(const std::string& report);

}  // namespace ftrun::launcher
