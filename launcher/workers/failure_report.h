// Worker failures as torchrun reports them: reading a worker's error.json (written by
// torch's @record), choosing the root cause, and the "Root Cause" summary printed when the
// job fails. Pure apart from reading/writing the named files.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "launcher/workers/worker_process.h"
#include "rendezvous/job_state.h"

namespace ftrun::launcher {

using rendezvous::WorkerFailure;

// Builds the failure record of a worker that exited with `status`, reading `error_file` when
// it exists. An unreadable or malformed error file is reported in the message, never fatal.
WorkerFailure DescribeFailure(int local_rank, int rank, pid_t pid, const ExitStatus& status,
                              const std::string& error_file, const std::string& host,
                              int64_t now_seconds);

// Index of the root cause: the smallest timestamp, the first listed on a tie. REQUIRES:
// failures not empty.
size_t RootCauseIndex(const std::vector<WorkerFailure>& failures);

// torchrun's ChildFailedError text: "<name> FAILED", "Failures:", "Root Cause (first
// observed failure):", with lines of '=' and '-' as wide as the text (at most 60).
std::string FormatFailureSummary(const std::string& name,
                                 const std::vector<WorkerFailure>& failures);

// When the agent itself has TORCHELASTIC_ERROR_FILE (set by a scheduler), torchrun copies the
// root cause's error file there with "errorCode" added. Returns an error text on failure.
Status WriteAgentErrorFile(const std::string& path, const WorkerFailure& root);

// Local time as torchrun prints it: YYYY-MM-DD_HH:MM:SS.
std::string IsoTimestamp(int64_t seconds);

}  // namespace ftrun::launcher
