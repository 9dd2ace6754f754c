// RendezvousState, continued: a restarted server takes over the round that the rejoining
// nodes' workers still run (rebuilding), so that a master outage costs no restart and no step.
#include <algorithm>

#include "rendezvous/rendezvous_state.h"

namespace ftrun::rendezvous {
namespace {

bool SameRound(const NodeAssignment& a, const NodeAssignment& b) {
  return a.round == b.round && a.group_world_size == b.group_world_size &&
         a.world_size == b.world_size && a.master_addr == b.master_addr &&
         a.master_port == b.master_port;
}

std::string Claim(const NodeAssignment& c) {
  return "round " + std::to_string(c.round) + " group rank " + std::to_string(c.group_rank) +
         " of " + std::to_string(c.group_world_size);
}

}  // namespace

bool RendezvousState::TakeClaim(const NodeInfo& info, TimePoint now) {
  // Only a server that has not formed a round of its own takes a round from its joiners.
  if (phase_ != Phase::kForming || formed_any_) return false;
  if (!info.running) {
    if (rebuild_ && info.next_round > rebuild_->shape.round) {
      GiveUpRebuild("node " + info.host + " rejoined without its workers running round " +
                        std::to_string(rebuild_->shape.round),
                    now);
    }
    return false;
  }
  const NodeAssignment& c = *info.running;
  if (c.round > kMaxClaimedRound || c.group_world_size > spec_.max_nodes || c.group_rank < 0 ||
      c.group_rank >= c.group_world_size || c.world_size < 1 || c.base_rank < 0 ||
      c.base_rank >= c.world_size || c.group_world_size % std::max(1, spec_.node_unit) != 0) {
    return false;  // not a round this job could have run: a plain join
  }
  if (!rebuild_) {
    rebuild_ = Rebuild{c,
                       std::vector<std::string>(static_cast<size_t>(c.group_world_size)),
                       {},
                       After(now, spec_.liveness_timeout)};
    round_ = c.round;
    Changed();
  }
  Rebuild& r = *rebuild_;
  const std::string& holder = SameRound(c, r.shape) ? r.holders[c.group_rank] : info.node_id;
  auto earlier = r.claims.find(info.node_id);
  const bool moved = earlier != r.claims.end() && earlier->second.group_rank != c.group_rank;
  const bool static_mismatch =
      spec_.static_ranks && (c.group_rank != info.node_rank ||
                             (!spec_.master_addr.empty() && c.master_addr != spec_.master_addr));
  if (!SameRound(c, r.shape) || (!holder.empty() && holder != info.node_id) || moved ||
      static_mismatch) {
    GiveUpRebuild("node " + info.host + " claims " + Claim(c) + " at " + c.master_addr + ":" +
                      std::to_string(c.master_port) + ", which disagrees with the other claims",
                  now);
    return false;
  }
  r.holders[c.group_rank] = info.node_id;
  r.claims[info.node_id] = c;
  restart_count_ = std::max(restart_count_, std::min(c.restart_count, spec_.max_restarts));
  Changed();
  if (std::none_of(r.holders.begin(), r.holders.end(),
                   [](const std::string& h) { return h.empty(); })) {
    AdoptRebuiltRound(now);
  }
  return true;
}

void RendezvousState::AdoptRebuiltRound(TimePoint now) {
  const Rebuild& r = *rebuild_;
  // The claimed base ranks must follow from the claimants' worker counts.
  int world = 0;
  for (const auto& id : r.holders) {
    if (r.claims.at(id).base_rank != world) {
      return GiveUpRebuild("the claimed ranks of round " + std::to_string(r.shape.round) +
                               " do not add up (" + nodes_.at(id).info.host + ")",
                           now);
    }
    world += nodes_.at(id).info.nproc_per_node;
  }
  if (world != r.shape.world_size) {
    return GiveUpRebuild("the claimants of round " + std::to_string(r.shape.round) + " run " +
                             std::to_string(world) + " workers, not the claimed " +
                             std::to_string(r.shape.world_size),
                         now);
  }
  SetMembers(r.holders);
  // They ran: their network check (if any) is behind them.
  checked_.insert(members_.begin(), members_.end());
  master_addr_ = r.shape.master_addr;
  master_port_ = r.shape.master_port;
  round_ = r.shape.round;
  rebuild_.reset();
  formed_any_ = true;
  alive_members_ = static_cast<int>(members_.size());
  phase_ = Phase::kRunning;
  reason_.clear();
  failures_.clear();
  stopped_.clear();
  succeeded_.clear();
  // Its workers restored already (with the old server's plan, which they keep): this plan is
  // for the views of nodes rejoining later.
  restore_ = RestorePlan{r.shape.restore_copy, r.shape.restore_shards};
  round_run_started_ms_ = run_started_ms_;  // the claimants' joins carry the old server's
  std::vector<std::string> paths;
  for (const auto& m : members_) paths.push_back(nodes_.at(m).info.switch_path);
  events_.emplace_back(RoundFormed{members_, paths, /*rebuilt=*/true,
                                   DescribeRestore(restore_.copy, restore_.shards)});
  Changed();
  // Nodes that joined besides the round's wait as spares; a whole --node-unit that fits
  // scales the job up, as a join during a running round does.
  if (!spec_.static_ranks && static_cast<int>(members_.size()) < spec_.max_nodes &&
      RoundSize() > static_cast<int>(members_.size())) {
    StopOrFail(false, "nodes joined while the round was rebuilt; scaling up", {}, now);
  }
}

void RendezvousState::GiveUpRebuild(const std::string& why, TimePoint now) {
  const uint64_t round = rebuild_->shape.round;
  rebuild_.reset();
  events_.emplace_back(RebuildGivenUp{round, why});
  // The next round forms as a first round does (a last call below MAX), numbered after the
  // one given up, so that round numbers never repeat.
  round_ = round + 1;
  StartForming(now, /*reformation=*/false);
}

void RendezvousState::RebuildNodeGone(const std::string& node_id, const std::string& why,
                                      TimePoint now) {
  if (rebuild_ && rebuild_->claims.count(node_id)) {
    GiveUpRebuild("node " + why + " before every group rank rejoined", now);
  }
}

void RendezvousState::AddRebuildTo(NodeView& v, const std::string& node_id) const {
  if (!rebuild_) return;
  auto c = rebuild_->claims.find(node_id);
  if (c == rebuild_->claims.end()) return;
  // The claimant's workers go on as they are while the others rejoin.
  v.phase = Phase::kRunning;
  v.round = c->second.round;
  v.member = true;
  v.assignment = c->second;
  v.assignment.restart_count = restart_count_;
  v.assignment.max_restarts = spec_.max_restarts;
  v.nodes_joined = c->second.group_world_size;
}

}  // namespace ftrun::rendezvous
