#include "launcher/agent/flash_inventory.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

namespace ftrun::launcher {

std::vector<rendezvous::FlashCopy> FlashInventory(const SnapshotStore& snapshots,
                                                  const ReplicaStore* replicas) {
  // (group, world size) -> steps: a copy saved by jobs of two sizes stays two entries.
  std::map<std::pair<std::string, int>, std::set<int64_t>> held;
  for (int lr = 0; lr < snapshots.local_ranks(); ++lr) {
    for (const auto& view : snapshots.Complete(lr)) {
      held[{view.meta.group, view.meta.target.world_size}].insert(static_cast<int64_t>(view.step));
    }
  }
  if (replicas != nullptr) {
    for (const auto& group : replicas->Groups()) {
      for (const auto& replica : replicas->Complete(group)) {
        held[{group, 0}].insert(static_cast<int64_t>(replica.step));
      }
    }
  }
  std::vector<rendezvous::FlashCopy> out;
  for (auto& [key, steps] : held) {
    if (steps.empty()) continue;
    out.push_back({key.first, key.second, std::vector<int64_t>(steps.rbegin(), steps.rend())});
  }
  return out;
}

}  // namespace ftrun::launcher
