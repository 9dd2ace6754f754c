#include "launcher/agent/fault_record.h"

#include <csignal>
#include <cstring>

#include "common/json_message.h"
#include "common/signals.h"
#include "launcher/workers/failure_report.h"

namespace ftrun::launcher {
namespace {

// A traceback's last line names the exception ("ValueError: bad shape"); torchrun's made-up
// text for a process without an error file does not count as one.
bool IsException(const WorkerFailure& f) {
  return f.error_file != "<N/A>" && !f.error_file.empty() && !f.message.empty() && f.exitcode > 0;
}

std::string LastLine(const std::string& text) {
  const size_t end = text.find_last_not_of("\n ");
  if (end == std::string::npos) return text;
  const size_t start = text.find_last_of('\n', end);
  return text.substr(start == std::string::npos ? 0 : start + 1,
                     end + 1 - (start == std::string::npos ? 0 : start + 1));
}

JsonMessage FailureJson(const WorkerFailure& f) {
  JsonMessage j(f.host, "host");
  j.Set("rank", f.rank)
      .Set("local_rank", f.local_rank)
      .Set("pid", f.pid)
      .Set("time", f.timestamp)
      .Set("message", f.message.substr(0, 4096));
  if (f.exitcode < 0) {
    j.Set("signal", SignalName(-f.exitcode));
  } else {
    j.Set("exit_code", f.exitcode);
  }
  return j;
}

}  // namespace

void FaultHistory::RoundStarted(uint64_t round, int restart_count, int64_t now) {
  attempts_.push_back(AttemptFaults{round, restart_count, now, {}, ""});
}

void FaultHistory::LocalFailure(const WorkerFailure& failure) {
  if (attempts_.empty()) return;
  attempts_.back().failures.push_back(failure);
}

void FaultHistory::RoundStopping(const std::string& reason) {
  if (attempts_.empty() || !attempts_.back().stop_reason.empty()) return;
  attempts_.back().stop_reason = reason;
}

std::optional<std::string> FaultHistory::RepeatedException(const JobResult& result) const {
  if (result.succeeded || result.failures.empty() || attempts_.size() < 2) return std::nullopt;
  const WorkerFailure& root = result.failures[RootCauseIndex(result.failures)];
  if (!IsException(root)) return std::nullopt;
  for (const WorkerFailure& f : attempts_[attempts_.size() - 2].failures) {
    if (IsException(f) && f.message == root.message) return LastLine(root.message);
  }
  return std::nullopt;
}

std::string FaultHistory::RecordJson(const JobResult& result,
                                     const FaultRecordContext& context) const {
  JsonMessage j(context.run_id, "run_id");
  j.Set("format", 1)
      .Set("host", context.host)
      .Set("outcome", std::string(result.succeeded ? "succeeded" : "failed"))
      .Set("exit_code", context.exit_code)
      .Set("reason", result.reason)
      .Set("finished", context.finished)
      .Set("restarts_used", attempts_.empty() ? 0 : attempts_.back().restart_count)
      .Set("max_restarts", context.max_restarts)
      .Set("retryable", context.exit_code != kExitNotRetryable);
  if (context.last_step) j.Set("last_step", *context.last_step);
  if (context.newest_snapshot) j.Set("newest_snapshot_step", *context.newest_snapshot);
  if (!result.failures.empty()) {
    j.Set("root_cause", FailureJson(result.failures[RootCauseIndex(result.failures)]));
  }
  for (const auto& f : result.failures) j.Append("failures", FailureJson(f));
  for (const auto& a : attempts_) {
    JsonMessage aj("attempt", "kind");
    aj.Set("round", a.round).Set("restart_count", a.restart_count).Set("started", a.started);
    if (!a.stop_reason.empty()) aj.Set("stop_reason", a.stop_reason);
    for (const auto& f : a.failures) aj.Append("failures", FailureJson(f));
    j.Append("attempts", aj);
  }
  return j.str();
}

}  // namespace ftrun::launcher
