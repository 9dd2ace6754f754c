// RendezvousState, continued: the pre-flight network check between a formed round and its
// workers. A round that has a node not yet checked is first `checking`; the faulty nodes (and
// with exclude_stragglers the stragglers) then leave the job and the round forms again from
// the others, or the job fails when fewer than MIN are left or the fault cannot be isolated.
#include <fmt/format.h>

#include <map>

#include "rendezvous/credentials.h"
#include "rendezvous/rendezvous_state.h"

namespace ftrun::rendezvous {
namespace {

std::string CommaList(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

}  // namespace

void RendezvousState::MaybeStartCheck(TimePoint now) {
  if (!spec_.check.enabled) return;
  SparesPromoted(now);
  bool new_node = false;
  for (const auto& m : members_) new_node = new_node || !checked_.count(m);
  if (!new_node) return;
  if (members_.size() < 2) {
    checked_.insert(members_.begin(), members_.end());  // nothing to pair it with
    return;
  }
  std::vector<NodeInfo> infos;
  for (const auto& m : members_) infos.push_back(nodes_.at(m).info);
  check_.emplace(std::move(infos), spec_.check, next_check_order_, now, NewSecret());
  phase_ = Phase::kChecking;
  events_.emplace_back(NetworkCheckStarted{members_});
  Changed();
  AfterCheckProgress(now);  // a plan with nothing to run is done at once
}

void RendezvousState::ReportCheck(const std::string& node_id, uint64_t round, uint64_t order_id,
                                  const std::vector<CheckTaskResult>& results, TimePoint now) {
  Seen(node_id, now);
  if (phase_ == Phase::kRunning && spare_check_ && round == round_) {
    if (spare_check_->Report(node_id, order_id, results, now)) AfterSpareCheckProgress(now);
    return;
  }
  if (phase_ != Phase::kChecking || round != round_ || !InRound(node_id)) return;
  if (check_->Report(node_id, order_id, results, now)) AfterCheckProgress(now);
}

void RendezvousState::AfterCheckProgress(TimePoint now) {
  next_check_order_ = check_->next_id();
  Changed();  // a new wave (new orders), or the verdict
  if (check_->done()) FinishCheck(now);
}

void RendezvousState::FinishCheck(TimePoint now) {
  const NetworkCheckReport report = check_->report();
  std::map<std::string, std::string> hosts;
  for (const auto& m : members_) hosts[m] = check_->HostOf(m);
  check_.reset();
  last_check_ = report;
  ++check_id_;

  std::vector<std::string> out;        // node ids leaving the job
  std::vector<std::string> out_hosts;  // and their names, for the message
  std::map<std::string, std::string> why;
  for (const auto& n : report.nodes) {
    const bool straggler = n.verdict == NodeVerdict::kStraggler;
    if (n.verdict != NodeVerdict::kFaulty && !(straggler && spec_.check.exclude_stragglers)) {
      continue;
    }
    out.push_back(n.node);
    out_hosts.push_back(hosts[n.node]);
    why[n.node] = fmt::format("the network check found it {} ({})",
                              straggler ? "a straggler" : "faulty", n.reason);
  }
  bool by_history = false;
  if (!report.isolated) {
    // Two nodes (a survivor and the spare taking a lost node's place) cannot tell which end of
    // a broken pair is at fault; a node that passed an earlier check is the healthy reference,
    // so the newcomers that failed are the faulty ones and the spare is not promoted.
    bool old_failed = false, new_failed = false;
    for (const auto& id : out) (checked_.count(id) ? old_failed : new_failed) = true;
    if (old_failed && new_failed) {
      by_history = true;
      std::vector<std::string> kept_hosts;
      for (const auto& id : out) {
        if (checked_.count(id)) kept_hosts.push_back(hosts[id]);
      }
      for (auto it = out.begin(); it != out.end();) {
        if (checked_.count(*it)) {
          why.erase(*it);
          it = out.erase(it);
        } else {
          ++it;
        }
      }
      out_hosts.clear();
      for (const auto& id : out) {
        out_hosts.push_back(hosts[id]);
        why[id] += "; " + CommaList(kept_hosts) + " passed an earlier check";
      }
    }
  }
  if (!report.isolated && !by_history) {
    // No node is known to be the bad one: the job fails, and no agent is told to leave
    // (exit 75 would have the scheduler replace healthy hosts).
    events_.emplace_back(NetworkCheckFinished{"could not isolate " + CommaList(out_hosts), report});
    Fail("the network check could not isolate the fault (no healthy node to compare with): " +
         CommaList(out_hosts) + " failed every test");
    return;
  }
  for (const auto& [id, reason] : why) excluded_[id] = reason;
  events_.emplace_back(NetworkCheckFinished{
      out.empty() ? "all nodes passed" : "excluded " + CommaList(out_hosts), report});
  for (const auto& m : members_) {
    if (!excluded_.count(m)) checked_.insert(m);
  }
  if (out.empty()) {
    phase_ = Phase::kRunning;
    Changed();
    MaybeCheckSpares(now);
    return;
  }
  for (const auto& id : out) {
    events_.emplace_back(NodeEvent{NodeEventKind::kExcluded, id, hosts[id], excluded_[id]});
    nodes_.erase(id);  // it leaves; RemoveNode would restart the check
    --alive_members_;
  }
  const int left = RoundSize();
  if (left < spec_.min_nodes) {
    Fail(fmt::format("the network check excluded {}; {} node(s) left, --nnodes needs at least {}",
                     CommaList(out_hosts), left, spec_.min_nodes));
    return;
  }
  StartForming(now, /*reformation=*/true);  // the others form the round at once
}

void RendezvousState::AddCheckTo(NodeView& v, const std::string& node_id) const {
  if (phase_ == Phase::kChecking && check_) v.check = check_->OrderFor(node_id);
  if (phase_ == Phase::kRunning && spare_check_) v.check = spare_check_->OrderFor(node_id);
  if (auto it = excluded_.find(node_id); it != excluded_.end()) v.excluded = it->second;
  if (last_check_) {
    v.check_id = check_id_;
    v.check_table = RenderTable(*last_check_);
    v.check_json = ToJson(*last_check_).str();
  }
}

}  // namespace ftrun::rendezvous
