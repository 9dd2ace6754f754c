// RendezvousState, continued: what one node sees of the job (its view).
#include <algorithm>

#include "rendezvous/rendezvous_state.h"

namespace ftrun::rendezvous {
namespace {

// "host:port", with an IPv6 address in brackets.
std::string JoinHostPort(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos && !host.starts_with('[');
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

}  // namespace

NodeView RendezvousState::View(const std::string& node_id) const {
  NodeView v;
  v.version = version_;
  v.phase = phase_;
  v.round = round_;
  v.restart_count = restart_count_;
  v.max_restarts = spec_.max_restarts;
  v.reason = reason_;
  if (phase_ == Phase::kStopping || phase_ == Phase::kFailed || phase_ == Phase::kSaving) {
    v.failures = failures_;
  }
  if (phase_ == Phase::kSaving) {
    SaveOrder o;
    o.id = save_->id();
    o.collecting = save_->stage() == SaveRound::Stage::kCollecting;
    if (save_->decision()) {
      o.step = save_->decision()->step;
      o.savers = save_->decision()->savers;
    }
    o.finalize = save_->stage() == SaveRound::Stage::kFinalizing;
    o.finalizer = save_->finalizer();
    v.save = o;
  }
  AddCheckTo(v, node_id);
  v.stacks_id = stacks_id_;
  const bool running = phase_ != Phase::kForming && alive_members_ > 0;
  v.nodes_joined = running ? static_cast<int>(members_.size())
                           : std::min<int>(static_cast<int>(nodes_.size()), spec_.max_nodes);
  v.nodes_waiting = static_cast<int>(nodes_.size()) - (running ? alive_members_ : v.nodes_joined);
  // Spares are the nodes beyond MAX: a round below MAX takes in every whole --node-unit that
  // joins (MAX is a multiple of it), so those outside it wait for a unit, not for a loss.
  v.nodes_spare = std::clamp<int>(static_cast<int>(nodes_.size()) - spec_.max_nodes, 0,
                                  std::max(0, v.nodes_waiting));
  auto it = rank_of_.find(node_id);
  v.spare = running && v.nodes_spare > 0 && it == rank_of_.end() && nodes_.count(node_id) != 0;
  if (running && it != rank_of_.end()) {
    v.member = true;
    NodeAssignment& a = v.assignment;
    a.round = round_;
    a.restart_count = restart_count_;
    a.max_restarts = spec_.max_restarts;
    a.group_rank = it->second;
    a.group_world_size = static_cast<int>(members_.size());
    a.base_rank = base_rank_[it->second];
    a.world_size = world_size_;
    a.master_addr = master_addr_;
    a.master_port = master_port_;
    bool replicas = false;
    for (const auto& id : members_) {
      auto node = nodes_.find(id);
      const bool serves = node != nodes_.end() && node->second.info.replica_port > 0;
      replicas |= serves;
      a.replica_peers.push_back(
          serves ? JoinHostPort(node->second.info.addr, node->second.info.replica_port) : "");
    }
    if (replicas) {
      a.replica_key = spec_.replica_key;
      std::vector<std::string> paths;
      for (const auto& id : members_) {
        auto node = nodes_.find(id);
        paths.push_back(node != nodes_.end() ? node->second.info.switch_path : "");
      }
      a.replica_order = ReplicaOrder(paths, it->second);
    } else {
      a.replica_peers.clear();
    }
    a.restore_copy = restore_.copy;
    a.restore_shards = restore_.shards;
    a.run_started_ms = round_run_started_ms_;
    if (phase_ == Phase::kRunning && members_.size() > 1) AddStorePeersTo(v);
  }
  AddRebuildTo(v, node_id);
  return v;
}

void RendezvousState::AddStorePeersTo(NodeView& v) const {
  for (size_t rank = 0; rank < members_.size(); ++rank) {
    auto n = nodes_.find(members_[rank]);
    if (n == nodes_.end() || !n->second.info.store_listens) continue;
    // Group rank 0's is the store its workers use: where they are told it is.
    v.store_peers.push_back({static_cast<int>(rank), rank == 0 ? master_addr_ : n->second.info.addr,
                             rank == 0 ? master_port_ : n->second.info.free_port});
  }
}

}  // namespace ftrun::rendezvous
