#include "rendezvous/apply_report.h"

#include "rendezvous/wire.h"

namespace ftrun::rendezvous {

Status ApplyReport(RendezvousState& state, const std::string& node, const RoundReport& r,
                   TimePoint now) {
  const ReportDetails& d = r.details;
  switch (r.kind) {
    case ReportKind::kFailed:
      if (r.failures.empty()) return Error{"failure report without failures"};
      state.ReportFailed(node, r.round, r.failures, now);
      return {};
    case ReportKind::kSucceeded:
      state.ReportSucceeded(node, r.round, now);
      return {};
    case ReportKind::kStopped:
      state.ReportStopped(node, r.round, r.free_port, now, r.flash);
      return {};
    case ReportKind::kProgress:
      state.ReportProgress(node, r.round, d.save_id, d.progress, now);
      return {};
    case ReportKind::kSaved:
      state.ReportSaved(node, r.round, d.save_id, d.rank, d.finalize, d.ok, d.error, now);
      return {};
    case ReportKind::kChecked:
      state.ReportCheck(node, r.round, d.check_id, d.check_results, now);
      return {};
    case ReportKind::kUnreachable:
      state.ReportUnreachable(node, r.round, d.unreachable_rank, d.error, now);
      return {};
    case ReportKind::kStacks:  // not the state's: the server's StacksBoard keeps them
      return {};
  }
  return Error{"unknown report kind"};
}

Status ApplyReport(RendezvousState& state, const std::string& node, const v1::ReportRequest& r,
                   TimePoint now) {
  if (auto s = CheckLimits(r); !s) return s;
  auto report = FromWire(r);
  if (!report) return report.error();
  return ApplyReport(state, node, *report, now);
}

}  // namespace ftrun::rendezvous
