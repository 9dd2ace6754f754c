#include "rendezvous/rendezvous_state.h"

#include <algorithm>
#include <cmath>

namespace ftrun::rendezvous {
namespace {

// How often liveness is checked; small against every timeout it serves.
constexpr Duration kSweepInterval{0.2};

std::string NodesSpec(const JobSpec& s) {
  return s.min_nodes == s.max_nodes
             ? std::to_string(s.max_nodes)
             : std::to_string(s.min_nodes) + ":" + std::to_string(s.max_nodes);
}

}  // namespace

const char* PhaseName(Phase p) {
  constexpr const char* kNames[] = {"forming", "running", "stopping", "succeeded",
                                    "failed",  "saving",  "checking"};
  return kNames[static_cast<int>(p)];
}

const char* NodeEventName(NodeEventKind kind) {
  constexpr const char* kNames[] = {"node_joined", "node_left", "node_lost", "node_excluded"};
  return kNames[static_cast<int>(kind)];
}

RendezvousState::RendezvousState(JobSpec spec, TimePoint now) : spec_(std::move(spec)) {
  if (spec_.static_ranks) spec_.min_nodes = spec_.max_nodes;
  next_sweep_ = After(now, kSweepInterval);
  StartForming(now, /*reformation=*/false);
}

std::optional<JoinRefusal> RendezvousState::Join(const NodeInfo& info, TimePoint now) {
  using Kind = JoinRefusal::Kind;
  if (info.nproc_per_node <= 0) {
    return JoinRefusal{Kind::kMismatch, "node " + info.host + " asks for " +
                                            std::to_string(info.nproc_per_node) +
                                            " workers per node"};
  }
  if (spec_.nproc_per_node != 0 && info.nproc_per_node != spec_.nproc_per_node) {
    return JoinRefusal{Kind::kMismatch, "--nproc-per-node " + std::to_string(info.nproc_per_node) +
                                            " on " + info.host + " differs from the job's " +
                                            std::to_string(spec_.nproc_per_node)};
  }
  if (spec_.static_ranks) {
    if (info.node_rank < 0 || info.node_rank >= spec_.max_nodes) {
      return JoinRefusal{Kind::kMismatch, "--node-rank " + std::to_string(info.node_rank) + " on " +
                                              info.host + " is not below --nnodes " +
                                              std::to_string(spec_.max_nodes)};
    }
    for (const auto& [id, n] : nodes_) {
      if (id != info.node_id && n.info.node_rank == info.node_rank) {
        return JoinRefusal{Kind::kRetry, "node rank " + std::to_string(info.node_rank) +
                                             " is held by " + n.info.host + " (" + id + ")"};
      }
    }
  }
  if (auto ex = excluded_.find(info.node_id); ex != excluded_.end()) {
    return JoinRefusal{Kind::kMismatch, "node " + info.host + " is excluded: " + ex->second};
  }
  if (!spec_.check.enabled && info.probe_port > 0 && spec_.max_nodes > 1) {
    return JoinRefusal{Kind::kMismatch, "node " + info.host +
                                            " asks for --network-check, but this rendezvous "
                                            "server runs without it (ftrun master "
                                            "--network-check)"};
  }
  if (spec_.check.enabled && info.probe_port <= 0) {
    return JoinRefusal{Kind::kMismatch, "node " + info.host +
                                            " has no network-check probe; start every agent "
                                            "with --network-check"};
  }
  if (spec_.nproc_per_node == 0) spec_.nproc_per_node = info.nproc_per_node;
  NodeInfo joined = info;
  joined.flash_current = !info.running.has_value();
  // The run began with the earliest agent any node reports (a restarted server learns it
  // back from the agents, which keep what a round told them).
  if (info.run_started_ms > 0 && (run_started_ms_ == 0 || info.run_started_ms < run_started_ms_))
    run_started_ms_ = info.run_started_ms;
  auto it = nodes_.find(info.node_id);
  if (it != nodes_.end()) {  // a repeated join: refresh
    it->second.info = joined;
    Seen(info.node_id, now);
    if (rebuild_) TakeClaim(info, now);
    return std::nullopt;
  }
  nodes_[info.node_id] = Node{joined, now, std::nullopt, next_join_seq_++, std::nullopt};
  events_.emplace_back(NodeEvent{NodeEventKind::kJoined, info.node_id, info.host, ""});
  const bool claimed = TakeClaim(info, now);
  if (!claimed && !rebuild_ && phase_ == Phase::kForming && !formed_any_ &&
      (info.next_round > round_ || info.restart_count > restart_count_)) {
    // A node of this job's earlier server (restarted): go on from where it was. Only before
    // this server formed a round, and bounded: a joiner's claim cannot end the job (at most
    // --max-restarts spent) nor overflow the round numbers.
    round_ = std::max(round_, std::min(info.next_round, kMaxClaimedRound));
    restart_count_ = std::max(restart_count_, std::min(info.restart_count, spec_.max_restarts));
    Changed();
  }
  switch (phase_) {
    case Phase::kForming:
      TryCompleteRound(now);
      break;
    case Phase::kRunning:
      // Scale up once a whole --node-unit of new nodes waits and still fits.
      if (!spec_.static_ranks && static_cast<int>(members_.size()) < spec_.max_nodes &&
          RoundSize() > static_cast<int>(members_.size())) {
        StopOrFail(false, "node " + info.host + " joined; scaling up", {}, now);
      }
      MaybeCheckSpares(now);  // it waits outside the round: checked meanwhile
      break;
    default:
      break;  // it joins the next round (or sees the job's end)
  }
  return std::nullopt;
}

void RendezvousState::Seen(const std::string& node_id, TimePoint now) {
  auto it = nodes_.find(node_id);
  if (it == nodes_.end()) return;
  it->second.last_seen = now;
  it->second.disconnected_at.reset();
  it->second.answered_at.reset();
}

void RendezvousState::Disconnected(const std::string& node_id, TimePoint now) {
  auto it = nodes_.find(node_id);
  if (it != nodes_.end()) it->second.disconnected_at = now;
}

void RendezvousState::Answered(const std::string& node_id, TimePoint now) {
  auto it = nodes_.find(node_id);
  if (it != nodes_.end()) it->second.answered_at = now;
}

void RendezvousState::Leave(const std::string& node_id, TimePoint now) {
  if (nodes_.count(node_id)) {
    events_.emplace_back(
        NodeEvent{NodeEventKind::kLeft, node_id, nodes_.at(node_id).info.host, ""});
    RemoveNode(node_id, "left", now);
  }
}

bool RendezvousState::InRound(const std::string& node_id) const {
  return (phase_ != Phase::kForming) && rank_of_.count(node_id) != 0;
}

void RendezvousState::RemoveNode(const std::string& node_id, const std::string& why,
                                 TimePoint now) {
  const std::string host = nodes_.at(node_id).info.host;
  const bool member = InRound(node_id);
  const std::vector<int> ranks = member ? RanksOf(node_id) : std::vector<int>{};
  nodes_.erase(node_id);
  if (member) --alive_members_;
  if (finished()) return;
  if (rebuild_) RebuildNodeGone(node_id, host + " " + why, now);
  if (phase_ == Phase::kForming) {
    TryCompleteRound(now);
  } else if (member && phase_ == Phase::kChecking) {
    check_.reset();  // the round forms again without it, and is checked again
    StartForming(now, /*reformation=*/true);
  } else if (member && phase_ == Phase::kRunning) {
    StopOrFail(false, "node " + host + " " + why, {}, now);
  } else if (member && phase_ == Phase::kSaving) {
    BlameTheLoss(host, why);
    save_->NodeGone(node_id, ranks, now);
    AfterSaveEvent(now);
  } else if (member && phase_ == Phase::kStopping) {
    BlameTheLoss(host, why);
    MaybeFinishStopping(now);  // the lost node owes no report
  }
}

void RendezvousState::Abort(const std::string& reason) {
  if (!finished()) Fail(reason);
}

std::vector<std::string> RendezvousState::NodeIds() const {
  std::vector<std::string> out;
  for (const auto& [id, n] : nodes_) out.push_back(id);
  return out;
}

void RendezvousState::Tick(TimePoint now) {
  if (finished()) return;
  if (now >= next_sweep_) {
    next_sweep_ = After(now, kSweepInterval);
    SweepLiveness(now);
  }
  if (phase_ == Phase::kSaving) {
    save_->Tick(now);
    AfterSaveEvent(now);
  }
  if (phase_ == Phase::kChecking && check_->Tick(now)) AfterCheckProgress(now);
  if (spare_check_ && phase_ != Phase::kRunning) spare_check_.reset();  // the round stops
  if (spare_check_ && spare_check_->Tick(now)) AfterSpareCheckProgress(now);
  MaybeCheckSpares(now);
  if (rebuild_ && now >= rebuild_->deadline) {
    GiveUpRebuild("not every group rank of round " + std::to_string(rebuild_->shape.round) +
                      " rejoined within liveness_timeout=" + SecondsText(spec_.liveness_timeout),
                  now);
  }
  if (phase_ == Phase::kForming) {
    TryCompleteRound(now);
    if (phase_ == Phase::kForming && now - forming_since_ >= spec_.join_timeout) {
      Fail("the rendezvous did not complete within " + spec_.join_timeout_key + "=" +
           SecondsText(spec_.join_timeout) + ": " + std::to_string(nodes_.size()) +
           " node(s) joined, --nnodes is " + NodesSpec(spec_));
    }
  }
}

void RendezvousState::SweepLiveness(TimePoint now) {
  const bool failure_stop = failure_stop_ != FailureStop::kNone;
  std::vector<std::pair<std::string, std::string>> lost;
  for (const auto& [id, n] : nodes_) {
    const bool failing = failure_stop && InRound(id);
    const Duration grace = failing ? std::min(spec_.disconnect_grace, kFailureDisconnectGrace)
                                   : spec_.disconnect_grace;
    const Duration rewatch =
        failing ? kFailureRewatchGrace : std::max(spec_.disconnect_grace, kRewatchGrace);
    if (n.disconnected_at && now - *n.disconnected_at >= grace) {
      lost.emplace_back(id, "disconnected");
    } else if (n.answered_at && now - *n.answered_at >= rewatch) {
      lost.emplace_back(
          id, "disconnected: no call within " + SecondsText(rewatch) + " of its last answer");
    } else if (now - n.last_seen >= spec_.liveness_timeout) {
      lost.emplace_back(id, "silent for " + SecondsText(spec_.liveness_timeout));
    }
  }
  for (const auto& [id, why] : lost) {
    if (!nodes_.count(id)) continue;
    events_.emplace_back(NodeEvent{NodeEventKind::kLost, id, nodes_.at(id).info.host, why});
    RemoveNode(id, "lost (" + why + ")", now);
  }
}

std::optional<TimePoint> RendezvousState::NextDeadline() const {
  if (finished()) return std::nullopt;
  TimePoint d = next_sweep_;
  if (phase_ == Phase::kForming) {
    d = std::min(d, After(forming_since_, spec_.join_timeout));
    if (last_call_deadline_) d = std::min(d, *last_call_deadline_);
    if (not_before_) d = std::min(d, *not_before_);
    if (rebuild_) d = std::min(d, rebuild_->deadline);
  }
  if (phase_ == Phase::kSaving) d = std::min(d, save_->deadline());
  if (phase_ == Phase::kChecking) d = std::min(d, check_->deadline());
  if (phase_ == Phase::kRunning && spare_check_) d = std::min(d, spare_check_->deadline());
  return d;
}

}  // namespace ftrun::rendezvous
