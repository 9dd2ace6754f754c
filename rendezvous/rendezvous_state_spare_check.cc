// RendezvousState, continued: the pre-flight network check of the nodes waiting outside a
// running round (spares, or nodes waiting for a whole --node-unit). They are checked while they
// wait, paired with a member that passed a check, so that a promotion does not wait for the
// check; a promoted node is checked again only when its check is older than
// spare_check_max_age. The member's workers keep running: the bandwidth probe only (its agent
// answers it), never the check command, which would start processes on the member's devices;
// with a check command the promotion still runs it (the probe has already failed the broken
// links early).
#include <fmt/format.h>

#include <iterator>

#include "rendezvous/credentials.h"
#include "rendezvous/rendezvous_state.h"

namespace ftrun::rendezvous {

void RendezvousState::MaybeCheckSpares(TimePoint now) {
  if (!spec_.check.enabled || phase_ != Phase::kRunning || spare_check_ || rebuild_) return;
  // Forget the waiting checks of nodes gone (they may join again as new nodes).
  for (auto it = spare_checked_at_.begin(); it != spare_checked_at_.end();) {
    it = nodes_.count(it->first) ? std::next(it) : spare_checked_at_.erase(it);
  }
  const std::string* reference = nullptr;
  for (const auto& m : members_) {
    if (nodes_.count(m) && checked_.count(m)) {
      reference = &m;
      break;
    }
  }
  if (!reference) return;
  std::vector<NodeInfo> infos{nodes_.at(*reference).info};
  std::vector<std::string> ids{*reference};
  for (const auto& [id, n] : nodes_) {
    if (!rank_of_.count(id) && !checked_.count(id) && !spare_checked_at_.count(id)) {
      infos.push_back(n.info);
      ids.push_back(id);
    }
  }
  if (infos.size() < 2) return;
  CheckSettings settings = spec_.check;
  settings.run_command = false;
  spare_check_.emplace(std::move(infos), settings, next_check_order_, now, NewSecret());
  events_.emplace_back(NetworkCheckStarted{ids});
  AfterSpareCheckProgress(now);
}

void RendezvousState::AfterSpareCheckProgress(TimePoint now) {
  next_check_order_ = spare_check_->next_id();
  Changed();  // a new wave (new orders), or the verdict
  if (spare_check_->done()) FinishSpareCheck(now);
}

void RendezvousState::FinishSpareCheck(TimePoint now) {
  const NetworkCheckReport report = spare_check_->report();
  std::map<std::string, std::string> hosts;
  for (const auto& n : report.nodes) hosts[n.node] = spare_check_->HostOf(n.node);
  spare_check_.reset();
  last_check_ = report;
  ++check_id_;
  // Only the waiting nodes are judged: the member passed an earlier check, so a pair that
  // fails is blamed on the newcomer (as at a promotion), and a running round is not disturbed.
  std::vector<std::string> out, out_hosts;
  for (const auto& n : report.nodes) {
    if (rank_of_.count(n.node) || !nodes_.count(n.node)) continue;
    const bool straggler = n.verdict == NodeVerdict::kStraggler;
    if (n.verdict == NodeVerdict::kFaulty || (straggler && spec_.check.exclude_stragglers)) {
      out.push_back(n.node);
      out_hosts.push_back(hosts[n.node]);
      excluded_[n.node] = fmt::format("the network check found it {} ({}) while it waited",
                                      straggler ? "a straggler" : "faulty", n.reason);
    } else {
      if (!spec_.check.run_command) checked_.insert(n.node);
      spare_checked_at_[n.node] = now;
    }
  }
  std::string summary = "waiting nodes passed";
  if (!out.empty()) {
    summary = "excluded";
    for (const auto& h : out_hosts) summary += " " + h;
  }
  events_.emplace_back(NetworkCheckFinished{summary, report});
  for (size_t i = 0; i < out.size(); ++i) {
    events_.emplace_back(
        NodeEvent{NodeEventKind::kExcluded, out[i], out_hosts[i], excluded_[out[i]]});
    nodes_.erase(out[i]);
  }
  Changed();
}

void RendezvousState::SparesPromoted(TimePoint now) {
  spare_check_.reset();
  for (const auto& m : members_) {
    auto it = spare_checked_at_.find(m);
    if (it == spare_checked_at_.end()) continue;
    if (now - it->second > spec_.check.spare_check_max_age) checked_.erase(m);
    spare_checked_at_.erase(it);
  }
}

}  // namespace ftrun::rendezvous
