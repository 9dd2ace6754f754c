#include "rendezvous/save_round.h"

#include <fmt/format.h>

namespace ftrun::rendezvous {
namespace {

std::string Ranks(const SaveDecision& d) {
  std::string out;
  for (const auto& s : d.savers) out += (out.empty() ? "" : ",") + std::to_string(s.rank);
  return out;
}

}  // namespace

SaveRound::SaveRound(uint64_t id, std::set<std::string> nodes, TimePoint now,
                     Duration collect_timeout, Duration save_timeout)
    : id_(id),
      waiting_for_(std::move(nodes)),
      started_(now),
      deadline_(After(now, collect_timeout)),
      save_timeout_(save_timeout) {
  if (waiting_for_.empty()) Plan(now);
}

int SaveRound::finalizer() const {
  return decision_ && !decision_->savers.empty() ? decision_->savers.front().rank : -1;
}

bool SaveRound::IsSaver(int rank) const {
  if (!decision_) return false;
  for (const auto& s : decision_->savers) {
    if (s.rank == rank) return true;
  }
  return false;
}

void SaveRound::AddProgress(const std::string& node, const std::vector<RankProgress>& ranks,
                            TimePoint now) {
  if (stage_ != Stage::kCollecting || !waiting_for_.erase(node)) return;
  progress_.insert(progress_.end(), ranks.begin(), ranks.end());
  if (waiting_for_.empty()) Plan(now);
}

void SaveRound::NodeGone(const std::string& node, const std::vector<int>& ranks, TimePoint now) {
  if (stage_ == Stage::kCollecting) {
    waiting_for_.erase(node);
    if (waiting_for_.empty()) Plan(now);
    return;
  }
  for (int r : ranks) RankFailed(r, now);
}

void SaveRound::RankFailed(int rank, TimePoint now) {
  if (stage_ == Stage::kCollecting) {
    for (auto& p : progress_) {
      if (p.rank == rank) p.healthy = false;
    }
    return;
  }
  if ((stage_ == Stage::kSaving || stage_ == Stage::kFinalizing) && IsSaver(rank)) {
    Finish(false, fmt::format("save of step {} abandoned: saver rank {} failed after {:.2f}s",
                              decision_->step, rank, Duration(now - started_).count()));
  }
}

void SaveRound::AddAck(int rank, bool finalize, bool ok, const std::string& error, TimePoint now) {
  const bool expected = (stage_ == Stage::kSaving && !finalize && IsSaver(rank)) ||
                        (stage_ == Stage::kFinalizing && finalize && rank == finalizer());
  if (!expected) return;
  if (!ok) {
    Finish(false, fmt::format("save of step {} failed on rank {}: {}", decision_->step, rank,
                              error.empty() ? "no reason given" : error));
    return;
  }
  const double secs = Duration(now - started_).count();
  if (stage_ == Stage::kFinalizing) {
    Finish(true, fmt::format("saved step {} (savers {}) in {:.3f}s", decision_->step,
                             Ranks(*decision_), secs));
    return;
  }
  acked_.insert(rank);
  if (acked_.size() < decision_->savers.size()) return;
  if (decision_->savers.size() > 1) {
    stage_ = Stage::kFinalizing;  // every part is written: one rank completes the checkpoint
    return;
  }
  Finish(true, fmt::format("saved step {} (saver {}) in {:.3f}s", decision_->step,
                           Ranks(*decision_), secs));
}

void SaveRound::Tick(TimePoint now) {
  if (stage_ == Stage::kDone || now < deadline_) return;
  if (stage_ == Stage::kCollecting) {
    Plan(now);  // plan with what arrived; silent nodes' ranks are simply not candidates
    return;
  }
  Finish(false, fmt::format("save of step {} timed out after {:.3g}s", decision_->step,
                            Duration(now - started_).count()));
}

void SaveRound::Plan(TimePoint now) {
  SavePlanResult r = PlanSave(progress_);
  if (!r.decision) {
    Finish(false, "no fault-time save: " + r.why_not);
    return;
  }
  decision_ = r.decision;
  stage_ = Stage::kSaving;
  deadline_ = After(now, save_timeout_);
}

void SaveRound::Finish(bool saved, const std::string& outcome) {
  stage_ = Stage::kDone;
  saved_ = saved;
  outcome_ = outcome;
}

}  // namespace ftrun::rendezvous
