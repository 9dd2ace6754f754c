// RendezvousState, continued: forming a round. Which nodes are candidates (the topology's order,
// claimed places of a rebuilt round first), when a round completes (max nodes, or min nodes
// once the last call has passed), and what it restores (the flash plan).
#include <algorithm>

#include "rendezvous/rendezvous_state.h"
#include "rendezvous/topology.h"

namespace ftrun::rendezvous {

void RendezvousState::StartForming(TimePoint now, bool reformation) {
  if (reformation) ++round_;
  failure_stop_ = FailureStop::kNone;
  phase_ = Phase::kForming;
  // members_ now only orders the next round; no node of it counts as alive in a round (the
  // job may fail before one forms, and its view must not count them; found by fuzzing).
  alive_members_ = 0;
  reformation_ = reformation;
  forming_since_ = now;
  last_call_deadline_.reset();
  stopped_.clear();
  succeeded_.clear();
  Changed();
  TryCompleteRound(now);
}

int RendezvousState::RoundSize() const {
  const int n = std::min<int>(static_cast<int>(nodes_.size()), spec_.max_nodes);
  return n - n % std::max(1, spec_.node_unit);
}

void RendezvousState::TryCompleteRound(TimePoint now) {
  if (phase_ != Phase::kForming || rebuild_) return;
  if (not_before_ && now < *not_before_) return;  // backing off a repeatedly failing node
  not_before_.reset();
  const int n = RoundSize();
  if (n >= spec_.max_nodes) {
    CompleteRound(now);
  } else if (n >= spec_.min_nodes) {
    if (reformation_) {
      CompleteRound(now);  // its members are all here already: no last call
    } else if (!last_call_deadline_) {
      last_call_deadline_ = After(now, spec_.last_call_timeout);
    } else if (now >= *last_call_deadline_) {
      CompleteRound(now);
    }
  } else {
    last_call_deadline_.reset();  // fell below min again
  }
}

std::vector<std::string> RendezvousState::FormingCandidates() const {
  std::vector<std::string> out;
  if (spec_.static_ranks) {
    for (const auto& [id, n] : nodes_) out.push_back(id);
    std::sort(out.begin(), out.end(), [&](const auto& a, const auto& b) {
      return nodes_.at(a).info.node_rank < nodes_.at(b).info.node_rank;
    });
    return out;
  }
  std::set<std::string> taken;
  for (const auto& m : members_) {
    if (nodes_.count(m)) taken.insert(m);
  }
  std::vector<const std::pair<const std::string, Node>*> rest;
  for (const auto& entry : nodes_) {
    if (!taken.count(entry.first)) rest.push_back(&entry);
  }
  // Nodes that declare a rank (dlrover-run: NODE_RANK, as DLRover's master orders them) come
  // first, in its order; the others in joining order.
  std::sort(rest.begin(), rest.end(), [](auto* a, auto* b) {
    const int ra = a->second.info.node_rank, rb = b->second.info.node_rank;
    if ((ra >= 0) != (rb >= 0)) return ra >= 0;
    if (ra != rb) return ra < rb;
    return a->second.join_seq < b->second.join_seq;
  });
  // The last round's places: this state's members, or, when it knows no round (a leader that
  // took over in etcd), the group ranks the nodes say they had.
  std::vector<std::string> places = members_;
  if (places.empty()) places = PlacesClaimed(rest, taken);
  // Survivors keep their group ranks: a newcomer (a spare) takes the place of a lost member,
  // the rest follow in joining order; places nobody takes close up.
  size_t next = 0;
  for (const auto& m : places) {
    if (taken.count(m)) {
      out.push_back(m);
    } else if (next < rest.size()) {
      out.push_back(rest[next++]->first);
    }
  }
  for (; next < rest.size(); ++next) out.push_back(rest[next]->first);
  // Extra nodes (beyond MAX, or beyond a multiple of --node-unit) wait for the next round.
  if (static_cast<int>(out.size()) > RoundSize()) out.resize(RoundSize());
  // Nodes under the same switches get adjacent ranks; among equals, the order above (so the
  // same members get the same ranks again).
  std::vector<std::vector<std::string>> keys;
  for (const auto& id : out) keys.push_back(TopologyKey(nodes_.at(id).info.switch_path));
  std::vector<size_t> order(out.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (keys[a].empty() != keys[b].empty()) return keys[b].empty();
    return keys[a] < keys[b];
  });
  std::vector<std::string> sorted;
  for (size_t i : order) sorted.push_back(out[i]);
  return sorted;
}

std::vector<std::string> RendezvousState::PlacesClaimed(
    std::vector<const std::pair<const std::string, Node>*>& rest,
    std::set<std::string>& taken) const {
  // rest is in declared-rank, then joining order: of two nodes claiming one place, the first
  // of them keeps it.
  std::vector<std::string> places;
  std::vector<const std::pair<const std::string, Node>*> newcomers;
  for (auto* entry : rest) {
    const int rank = entry->second.info.last_group_rank;
    const size_t at = static_cast<size_t>(rank);
    if (rank < 0 || rank >= RoundSize() || (at < places.size() && !places[at].empty())) {
      newcomers.push_back(entry);
      continue;
    }
    if (places.size() <= at) places.resize(at + 1);
    places[at] = entry->first;
    taken.insert(entry->first);
  }
  rest = std::move(newcomers);
  return places;
}

void RendezvousState::SetMembers(std::vector<std::string> members) {
  members_ = std::move(members);
  rank_of_.clear();
  base_rank_.clear();
  world_size_ = 0;
  for (size_t i = 0; i < members_.size(); ++i) {
    rank_of_[members_[i]] = static_cast<int>(i);
    base_rank_.push_back(world_size_);
    world_size_ += nodes_.at(members_[i]).info.nproc_per_node;
  }
}

void RendezvousState::CompleteRound(TimePoint now) {
  formed_any_ = true;
  SetMembers(FormingCandidates());
  alive_members_ = static_cast<int>(members_.size());
  const NodeInfo& leader = nodes_.at(members_.front()).info;
  master_addr_ = spec_.static_ranks && !spec_.master_addr.empty() ? spec_.master_addr : leader.addr;
  master_port_ = leader.free_port;
  phase_ = Phase::kRunning;
  reason_.clear();
  failures_.clear();
  PlanRoundRestore();
  std::vector<std::string> paths;
  for (const auto& m : members_) paths.push_back(nodes_.at(m).info.switch_path);
  events_.emplace_back(
      RoundFormed{members_, paths, false, DescribeRestore(restore_.copy, restore_.shards)});
  Changed();
  MaybeStartCheck(now);
  MaybeCheckSpares(now);
}

void RendezvousState::PlanRoundRestore() {
  std::vector<const NodeInfo*> infos;
  bool current = true;
  for (const auto& m : members_) {
    infos.push_back(&nodes_.at(m).info);
    current = current && infos.back()->flash_current;
  }
  // An inventory from before a member's workers last ran may name steps it has let go since
  // (or miss newer ones): then the workers agree among themselves (undecided).
  restore_ = current ? PlanRestore(infos, world_size_) : RestorePlan{};
  round_run_started_ms_ = run_started_ms_;  // one value for the whole round
  for (const auto& m : members_) nodes_.at(m).info.flash_current = false;
}

}  // namespace ftrun::rendezvous
