// RendezvousState, continued: what the members report about a round (failed, succeeded,
// stopped) and the restart policy a failure goes through (whom to blame, back-off, excluding
// a node that keeps failing), up to stopping or failing the round.
#include <algorithm>
#include <cmath>

#include "rendezvous/rendezvous_state.h"

namespace ftrun::rendezvous {

void RendezvousState::BlameTheLoss(const std::string& host, const std::string& why) {
  if (failure_stop_ == FailureStop::kNone) return;
  if (failure_stop_ == FailureStop::kSpent) --restart_count_;
  failure_stop_ = FailureStop::kNone;
  // Nor does the node that reported them count as failing.
  if (auto it = failure_times_.find(failing_node_); it != failure_times_.end()) {
    if (!it->second.empty()) it->second.pop_back();
  }
  to_exclude_.erase(failing_node_);
  not_before_.reset();
  const std::string reason = "node " + host + " " + why +
                             " (the worker failures before it followed from it: no restart spent)";
  reason_ = reason;
  after_save_.fail = false;
  after_save_.reason = reason;
  events_.emplace_back(RestartGivenBack{host, restart_count_});
  Changed();
}

std::string RendezvousState::ApplyRestartPolicy(const std::string& node_id, TimePoint now) {
  failing_node_ = node_id;
  auto& times = failure_times_[node_id];
  times.erase(std::remove_if(times.begin(), times.end(),
                             [&](TimePoint t) { return now - t > spec_.failure_window; }),
              times.end());
  times.push_back(now);
  const int count = static_cast<int>(times.size());
  const std::string host = nodes_.at(node_id).info.host;
  std::string out;
  if (count >= 2 && spec_.restart_backoff.count() > 0) {
    Duration wait = spec_.restart_backoff * std::pow(2.0, std::min(count - 2, 30));
    wait = std::min(wait, spec_.restart_backoff_max);
    not_before_ = After(now, wait);
    out += "; the next round waits " + SecondsText(wait) + " (" + host + " failed " +
           std::to_string(count) + " times within " + SecondsText(spec_.failure_window) + ")";
  }
  // Leave it out if the round can do without it: spares, or more nodes than MIN.
  if (spec_.exclude_after > 0 && count >= spec_.exclude_after && !spec_.static_ranks &&
      static_cast<int>(nodes_.size() - to_exclude_.size()) - 1 >= spec_.min_nodes) {
    to_exclude_[node_id] = "it failed " + std::to_string(count) + " times within " +
                           SecondsText(spec_.failure_window) +
                           " (exclude_after=" + std::to_string(spec_.exclude_after) + ")";
    out += "; " + host + " is left out of the next round";
  }
  return out;
}

void RendezvousState::ExcludeRepeatFailures() {
  for (const auto& [id, why] : to_exclude_) {
    auto it = nodes_.find(id);
    if (it == nodes_.end()) continue;
    excluded_[id] = why;
    events_.emplace_back(NodeEvent{NodeEventKind::kExcluded, id, it->second.info.host, why});
    nodes_.erase(it);
    failure_times_.erase(id);
  }
  to_exclude_.clear();
}

void RendezvousState::ReportFailed(const std::string& node_id, uint64_t round,
                                   const std::vector<WorkerFailure>& failures, TimePoint now) {
  Seen(node_id, now);
  if (round != round_ || !InRound(node_id) || failures.empty()) return;
  if (phase_ == Phase::kStopping || phase_ == Phase::kSaving) {
    // A failure racing the stop (often caused by it): listed, never a second restart.
    failures_.insert(failures_.end(), failures.begin(), failures.end());
    if (phase_ == Phase::kSaving) {
      auto& then = after_save_.failures;
      then.insert(then.end(), failures.begin(), failures.end());
      for (const auto& f : failures) save_->RankFailed(f.rank, now);
      AfterSaveEvent(now);
    }
    Changed();
    return;
  }
  if (phase_ != Phase::kRunning) return;
  const WorkerFailure& f = failures.front();
  std::string what = "worker rank " + std::to_string(f.rank) + " on " + f.host +
                     " failed (exitcode " + std::to_string(f.exitcode) + ")";
  if (restart_count_ < spec_.max_restarts) {
    ++restart_count_;
    failure_stop_ = FailureStop::kSpent;
    const std::string policy = ApplyRestartPolicy(node_id, now);
    StopOrFail(false,
               what + "; restart " + std::to_string(restart_count_) + "/" +
                   std::to_string(spec_.max_restarts) + policy,
               failures, now);
  } else {
    failure_stop_ = FailureStop::kExhausted;
    StopOrFail(true,
               what + (spec_.max_restarts == 0
                           ? " and --max-restarts is 0"
                           : "; restarts exhausted (" + std::to_string(spec_.max_restarts) + "/" +
                                 std::to_string(spec_.max_restarts) + ")"),
               failures, now);
  }
  // A member already gone is the likely cause of this failure: no need to wait for the sweep.
  SweepLiveness(now);
}

void RendezvousState::ReportSucceeded(const std::string& node_id, uint64_t round, TimePoint now) {
  Seen(node_id, now);
  if (phase_ != Phase::kRunning || round != round_ || !InRound(node_id)) return;
  succeeded_.insert(node_id);
  if (succeeded_.size() == members_.size()) {
    phase_ = Phase::kSucceeded;
    reason_ = "all " + std::to_string(world_size_) + " workers succeeded";
    Changed();
  }
}

void RendezvousState::ReportStopped(const std::string& node_id, uint64_t round, int free_port,
                                    TimePoint now,
                                    const std::optional<std::vector<FlashCopy>>& flash) {
  Seen(node_id, now);
  auto it = nodes_.find(node_id);
  if (it != nodes_.end() && free_port > 0) it->second.info.free_port = free_port;
  if (it != nodes_.end() && flash) {  // before the stop completes: the next round counts it
    it->second.info.flash = *flash;
    it->second.info.flash_reported = true;
    it->second.info.flash_current = true;
  }
  const bool stopping = phase_ == Phase::kStopping || phase_ == Phase::kSaving;
  if (!stopping || round != round_ || !InRound(node_id)) return;
  // A node with nothing to save may stop during the save; its report counts for the stop.
  stopped_.insert(node_id);
  if (phase_ == Phase::kStopping) MaybeFinishStopping(now);
}

void RendezvousState::MaybeFinishStopping(TimePoint now) {
  if (phase_ != Phase::kStopping || static_cast<int>(stopped_.size()) < alive_members_) return;
  for (const auto& m : members_) {
    if (nodes_.count(m) && !stopped_.count(m)) return;  // still waiting for a live member
  }
  ExcludeRepeatFailures();
  StartForming(now, /*reformation=*/true);
}

void RendezvousState::StopRound(const std::string& reason, TimePoint now) {
  if (phase_ != Phase::kSaving) stopped_.clear();  // stop reports made during a save count
  phase_ = Phase::kStopping;
  reason_ = reason;
  failures_.clear();
  Changed();
  MaybeFinishStopping(now);
}

void RendezvousState::Fail(const std::string& reason, std::vector<WorkerFailure> failures) {
  phase_ = Phase::kFailed;
  reason_ = reason;
  failures_ = std::move(failures);
  Changed();
}

}  // namespace ftrun::rendezvous
