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

void ReportOutcome(const JobResult& r, int exit_code, WorkerPlanner& planner,
                   const EnvMap& agent_env, AgentEvents& events);

}  // namespace ftrun::launcher
