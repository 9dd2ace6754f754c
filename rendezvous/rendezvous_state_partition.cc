// RendezvousState, continued: a member that cannot reach another member's store (a network
// partition between nodes that both still reach this server).
#include <algorithm>
#include <cmath>

#include "rendezvous/rendezvous_state.h"

namespace ftrun::rendezvous {

void RendezvousState::ReportUnreachable(const std::string& node_id, uint64_t round, int peer_rank,
                                        const std::string& error, TimePoint now) {
  Seen(node_id, now);
  if (phase_ != Phase::kRunning || round != round_ || !InRound(node_id)) return;
  if (peer_rank < 0 || static_cast<size_t>(peer_rank) >= members_.size()) return;
  const std::string& peer = members_[peer_rank];
  if (peer == node_id) return;  // no node checks its own store
  auto target = nodes_.find(peer);
  // A member whose transport is gone is down, not partitioned: the liveness rules lose it
  // (without a restart spent) within disconnect_grace.
  if (target == nodes_.end() || target->second.disconnected_at) return;
  // Host and address: nodes of one host (or of one image) may share a name.
  auto name = [](const NodeInfo& n) {
    return n.addr.empty() || n.addr == n.host ? n.host : n.host + " at " + n.addr;
  };
  const std::string from = name(nodes_.at(node_id).info);
  const std::string to = name(target->second.info);
  // Re-forming at once would meet the same partition: wait, longer each time it is found
  // again (the restart policy's back-off, at least 1 s), and spend no restart — the workers
  // did nothing wrong, and the job goes on once the network heals.
  if (partitions_ > 0 && now - last_partition_ > spec_.failure_window) partitions_ = 0;
  ++partitions_;
  last_partition_ = now;
  const Duration base = std::max(spec_.restart_backoff, Duration(1));
  const Duration wait = std::min<Duration>(base * std::pow(2.0, std::min(partitions_ - 1, 30)),
                                           std::max(spec_.restart_backoff_max, base));
  not_before_ = After(now, wait);
  events_.emplace_back(Partition{from, to, peer_rank, error, wait});
  char secs[32];
  std::snprintf(secs, sizeof secs, "%gs", wait.count());
  StopOrFail(false,
             "partition: node " + from + " cannot reach node " + to + " (group rank " +
                 std::to_string(peer_rank) + "'s store " + error +
                 "); no restart spent, the next round waits " + secs,
             {}, now);
}

}  // namespace ftrun::rendezvous
