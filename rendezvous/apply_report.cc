#include "rendezvous/apply_report.h"

#include <vector>

#include "rendezvous/wire.h"

namespace ftrun::rendezvous {
namespace {

template <class Repeated>
auto AllFromWire(const Repeated& in) {
  std::vector<decltype(FromWire(*in.begin()))> out;
  for (const auto& item : in) out.push_back(FromWire(item));
  return out;
}

}  // namespace

Status ApplyReport(RendezvousState& state, const std::string& node, const v1::ReportRequest& r,
                   TimePoint now) {
  if (auto s = CheckLimits(r); !s) return s;
  switch (r.kind()) {
    case v1::ReportRequest::KIND_FAILED: {
      auto failures = AllFromWire(r.failures());
      if (failures.empty()) return Error{"failure report without failures"};
      state.ReportFailed(node, r.round(), failures, now);
      return {};
    }
    case v1::ReportRequest::KIND_SUCCEEDED:
      state.ReportSucceeded(node, r.round(), now);
      return {};
    case v1::ReportRequest::KIND_STOPPED:
      state.ReportStopped(node, r.round(), r.free_port(), now);
      return {};
    case v1::ReportRequest::KIND_PROGRESS:
      state.ReportProgress(node, r.round(), r.save_id(), AllFromWire(r.progress()), now);
      return {};
    case v1::ReportRequest::KIND_SAVED:
      state.ReportSaved(node, r.round(), r.save_id(), r.saver_rank(), r.finalize(), r.ok(),
                        r.error(), now);
      return {};
    case v1::ReportRequest::KIND_CHECKED:
      state.ReportCheck(node, r.round(), r.check_id(), AllFromWire(r.check_results()), now);
      return {};
    default:
      return Error{"unknown report kind " + std::to_string(r.kind())};
  }
}

}  // namespace ftrun::rendezvous
