// RendezvousState, continued: the fault-time save between a running round and its stop.
#include "rendezvous/rendezvous_state.h"

namespace ftrun::rendezvous {

void RendezvousState::StopOrFail(bool fail, const std::string& reason,
                                 std::vector<WorkerFailure> failures, TimePoint now) {
  if (!spec_.fault_save) {
    if (fail) return Fail(reason, std::move(failures));
    StopRound(reason, now);
    if (phase_ == Phase::kStopping) failures_ = std::move(failures);
    return;
  }
  std::set<std::string> live;
  for (const auto& m : members_) {
    if (nodes_.count(m)) live.insert(m);
  }
  after_save_ = AfterSave{fail, reason, failures};
  failures_ = std::move(failures);
  stopped_.clear();
  save_.emplace(next_save_id_++, std::move(live), now, spec_.collect_timeout, spec_.save_timeout);
  save_stage_ = save_->stage();
  phase_ = Phase::kSaving;
  reason_ = reason;
  Changed();
  AfterSaveEvent(now);
}

void RendezvousState::AfterSaveEvent(TimePoint now) {
  if (phase_ != Phase::kSaving) return;
  if (save_->stage() != save_stage_) {
    save_stage_ = save_->stage();
    Changed();  // new orders for the nodes
  }
  if (!save_->done()) return;
  AfterSave then = std::move(after_save_);
  const std::string reason = then.reason + "; " + save_->outcome();
  if (then.fail) {
    Fail(reason, std::move(then.failures));
  } else {
    StopRound(reason, now);
    if (phase_ == Phase::kStopping) failures_ = std::move(then.failures);
  }
}

void RendezvousState::ReportProgress(const std::string& node_id, uint64_t round, uint64_t save_id,
                                     const std::vector<RankProgress>& ranks, TimePoint now) {
  Seen(node_id, now);
  if (phase_ != Phase::kSaving || round != round_ || save_->id() != save_id || !InRound(node_id)) {
    return;
  }
  // Only the node's own ranks count: a confused or hostile node cannot speak for others.
  const std::vector<int> own = RanksOf(node_id);
  std::vector<RankProgress> mine;
  for (const auto& r : ranks) {
    if (!own.empty() && r.rank >= own.front() && r.rank <= own.back()) mine.push_back(r);
  }
  save_->AddProgress(node_id, mine, now);
  AfterSaveEvent(now);
}

void RendezvousState::ReportSaved(const std::string& node_id, uint64_t round, uint64_t save_id,
                                  int rank, bool finalize, bool ok, const std::string& error,
                                  TimePoint now) {
  Seen(node_id, now);
  if (phase_ != Phase::kSaving || round != round_ || save_->id() != save_id || !InRound(node_id)) {
    return;
  }
  const std::vector<int> own = RanksOf(node_id);
  if (own.empty() || rank < own.front() || rank > own.back()) return;
  save_->AddAck(rank, finalize, ok, error, now);
  AfterSaveEvent(now);
}

JobStatus RendezvousState::Status(TimePoint now) const {
  JobStatus s;
  s.run_id = spec_.run_id;
  s.view = View("");
  s.min_nodes = spec_.min_nodes;
  s.max_nodes = spec_.max_nodes;
  const bool in_round = phase_ != Phase::kForming;
  s.world_size = in_round ? world_size_ : 0;
  const bool spares = in_round && s.view.nodes_spare > 0;
  auto add = [&](const std::string& id, const Node& n) {
    NodeStatus ns;
    ns.node_id = id;
    ns.host = n.info.host;
    ns.addr = n.info.addr;
    ns.node_rank = n.info.node_rank;
    ns.nproc_per_node = n.info.nproc_per_node;
    auto r = rank_of_.find(id);
    if (in_round && r != rank_of_.end()) {
      ns.group_rank = r->second;
      ns.base_rank = base_rank_[r->second];
    } else {
      ns.spare = spares;
    }
    ns.silent_seconds = Duration(now - n.last_seen).count();
    ns.disconnected = n.disconnected_at.has_value();
    ns.switch_path = n.info.switch_path;
    s.nodes.push_back(ns);
  };
  if (in_round) {
    for (const auto& m : members_) {
      if (auto it = nodes_.find(m); it != nodes_.end()) add(m, it->second);
    }
  }
  for (const auto& [id, n] : nodes_) {
    if (!in_round || !rank_of_.count(id)) add(id, n);
  }
  return s;
}

std::vector<int> RendezvousState::RanksOf(const std::string& node_id) const {
  auto it = rank_of_.find(node_id);
  if (it == rank_of_.end()) return {};
  auto node = nodes_.find(node_id);
  const int n = node == nodes_.end() ? 0 : node->second.info.nproc_per_node;
  std::vector<int> out;
  for (int i = 0; i < n; ++i) out.push_back(base_rank_[it->second] + i);
  return out;
}

}  // namespace ftrun::rendezvous
