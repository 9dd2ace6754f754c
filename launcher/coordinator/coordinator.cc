#include "launcher/coordinator/coordinator.h"

namespace ftrun::launcher {

using rendezvous::ReportKind;
using rendezvous::RoundReport;

void Coordinator::WorkersFailed(const std::vector<WorkerFailure>& failures) {
  auto r = RoundReport::Of(ReportKind::kFailed);
  r.failures = failures;
  Report(std::move(r));
}

void Coordinator::WorkersSucceeded() { Report(RoundReport::Of(ReportKind::kSucceeded)); }

void Coordinator::ReportProgress(uint64_t save_id,
                                 const std::vector<rendezvous::RankProgress>& ranks) {
  auto r = RoundReport::Of(ReportKind::kProgress);
  r.details.save_id = save_id;
  r.details.progress = ranks;
  Report(std::move(r));
}

void Coordinator::ReportSaved(uint64_t save_id, int rank, bool finalize, bool ok,
                              const std::string& error) {
  auto r = RoundReport::Of(ReportKind::kSaved);
  r.details.save_id = save_id;
  r.details.rank = rank;
  r.details.finalize = finalize;
  r.details.ok = ok;
  r.details.error = error;
  Report(std::move(r));
}

void Coordinator::ReportCheck(uint64_t order_id,
                              const std::vector<rendezvous::CheckTaskResult>& results) {
  auto r = RoundReport::Of(ReportKind::kChecked);
  r.details.check_id = order_id;
  r.details.check_results = results;
  Report(std::move(r));
}

}  // namespace ftrun::launcher
