#include "launcher/coordinator/coordinator.h"

#include "common/log.h"
#include "rendezvous/flash_plan.h"

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

std::optional<std::vector<rendezvous::FlashCopy>> Coordinator::TrimmedFlashInventory() const {
  if (!flash_inventory_) return std::nullopt;
  auto inventory = flash_inventory_();
  if (const std::string cut = rendezvous::TrimFlashInventory(inventory); !cut.empty()) {
    LauncherLog()->warn("flash checkpoint: the inventory sent to the rendezvous is trimmed: {}",
                        cut);
  }
  return inventory;
}

void Coordinator::TakeFlashInventory(rendezvous::NodeInfo& node) const {
  auto inventory = TrimmedFlashInventory();
  if (!inventory) return;
  node.flash = std::move(*inventory);
  node.flash_reported = true;
}

RoundReport Coordinator::StoppedReport(uint64_t round) const {
  auto r = RoundReport::Of(ReportKind::kStopped, round);
  r.flash = TrimmedFlashInventory();
  return r;
}

void Coordinator::GatherJobStacks(rendezvous::Duration /*wait*/, GatherDone done) {
  done(false, rendezvous::RpcOutcome{}, rendezvous::StacksCollection{});
}

}  // namespace ftrun::launcher
