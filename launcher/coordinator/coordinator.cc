#include "launcher/coordinator/coordinator.h"

namespace ftrun::launcher {

using rendezvous::ReportDetails;
using rendezvous::ReportKind;
using rendezvous::RoundReport;

namespace {

RoundReport With(ReportKind kind, ReportDetails details) {
  auto r = RoundReport::Of(kind);
  r.details = std::move(details);
  return r;
}

}  // namespace

void Coordinator::WorkersFailed(const std::vector<WorkerFailure>& failures) {
  auto r = RoundReport::Of(ReportKind::kFailed);
  r.failures = failures;
  Report(std::move(r));
}

void Coordinator::WorkersSucceeded() { Report(RoundReport::Of(ReportKind::kSucceeded)); }

void Coordinator::ReportProgress(uint64_t save_id,
                                 const std::vector<rendezvous::RankProgress>& ranks) {
  Report(With(ReportKind::kProgress, {.save_id = save_id, .progress = ranks}));
}

void Coordinator::ReportSaved(uint64_t save_id, int rank, bool finalize, bool ok,
                              const std::string& error) {
  Report(With(ReportKind::kSaved,
              {.save_id = save_id, .rank = rank, .finalize = finalize, .ok = ok, .error = error}));
}

void Coordinator::ReportCheck(uint64_t order_id,
                              const std::vector<rendezvous::CheckTaskResult>& results) {
  Report(With(ReportKind::kChecked, {.check_id = order_id, .check_results = results}));
}

void Coordinator::ReportStacks(uint64_t stacks_id, std::vector<rendezvous::RankStack> stacks) {
  Report(With(ReportKind::kStacks, {.stacks_id = stacks_id, .stacks = std::move(stacks)}));
}

void Coordinator::GatherJobStacks(rendezvous::Duration /*wait*/, GatherDone done) {
  done(false, rendezvous::RpcOutcome{}, rendezvous::StacksCollection{});
}

}  // namespace ftrun::launcher
