// FaultHistory: what this node saw of the job's faults, attempt by attempt. When the job ends
// in failure the agent writes it as the fault record (fault_record.json in the run's log
// directory: who failed, when, with which exit code or signal and message, the newest step
// reported and snapshotted, the restarts used) for schedulers and post-mortems, and asks it
// whether restarting could have helped.
//
// Restarting cannot help when the attempt before the last one ended with the same exception
// on this node as the job's root cause (the same message from torch's error file, e.g. a bug
// the script hits at the same step every time): the agent then exits kExitNotRetryable instead
// of 1, so Slurm's --requeue or a Kubernetes podFailurePolicy can fail the job for good.
//
// Pure: no I/O, time passed in. Thread: loop only (owned by the agent).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "launcher/coordinator/coordinator.h"

namespace ftrun::launcher {

// Exit code of an agent whose job failed in a way restarting cannot fix (EX_SOFTWARE).
inline constexpr int kExitNotRetryable = 70;

struct AttemptFaults {
  uint64_t round = 0;
  int restart_count = 0;
  int64_t started = 0;                  // seconds since the epoch
  std::vector<WorkerFailure> failures;  // this node's, in the order they happened
  std::string stop_reason;              // why the job stopped it ("" : it ran to the end)
};

// What the record says besides the history (the agent gathers it when the job ends).
struct FaultRecordContext {
  std::string run_id;
  std::string host;
  int max_restarts = 0;
  int exit_code = 1;
  int64_t finished = 0;                    // seconds since the epoch
  std::optional<int64_t> last_step;        // newest step a local rank reported
  std::optional<int64_t> newest_snapshot;  // newest flash-checkpoint step in this agent
};

class FaultHistory {
 public:
  void RoundStarted(uint64_t round, int restart_count, int64_t now);
  void LocalFailure(const WorkerFailure& failure);
  void RoundStopping(const std::string& reason);

  // The exception that made restarting useless (the last line of its message, e.g.
  // "ZeroDivisionError: division by zero"), or nullopt: see the file comment.
  std::optional<std::string> RepeatedException(const JobResult& result) const;

  // The fault record as one JSON object.
  std::string RecordJson(const JobResult& result, const FaultRecordContext& context) const;

  const std::vector<AttemptFaults>& attempts() const { return attempts_; }

 private:
  std::vector<AttemptFaults> attempts_;
};

}  // namespace ftrun::launcher
