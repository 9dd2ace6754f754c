#include "rendezvous/flash_plan.h"

#include <algorithm>
#include <map>
#include <set>

namespace ftrun::rendezvous {
namespace {

constexpr std::string_view kShardPrefix = "rank-";

// The rank of a shard group "rank-<r>" below world_size, or -1.
int ShardRank(const std::string& group, int world_size) {
  if (!group.starts_with(kShardPrefix) || group.size() == kShardPrefix.size() ||
      group.size() > kShardPrefix.size() + 9) {
    return -1;
  }
  int r = 0;
  for (size_t i = kShardPrefix.size(); i < group.size(); ++i) {
    if (group[i] < '0' || group[i] > '9') return -1;
    r = r * 10 + (group[i] - '0');
  }
  return r < world_size ? r : -1;
}

std::string NearestSwitch(const std::string& path) { return path.substr(0, path.find('/')); }

}  // namespace

RestorePlan PlanRestore(const std::vector<const NodeInfo*>& members, int world_size) {
  for (const NodeInfo* m : members) {
    if (!m->flash_reported) return {};
  }
  int64_t copy = -1;
  std::map<int64_t, std::set<int>, std::greater<>> ranks_at;  // step -> shards held
  for (const NodeInfo* m : members) {
    for (const FlashCopy& c : m->flash) {
      if (c.group.empty()) {
        for (int64_t s : c.steps) copy = std::max(copy, s);
        continue;
      }
      const int r = ShardRank(c.group, world_size);
      if (r < 0 || (c.world_size != 0 && c.world_size != world_size)) continue;
      for (int64_t s : c.steps) {
        if (s >= 0) ranks_at[s].insert(r);
      }
    }
  }
  int64_t shards = -1;
  for (const auto& [step, ranks] : ranks_at) {
    if (static_cast<int>(ranks.size()) == world_size) {
      shards = step;
      break;
    }
  }
  return RestorePlan{copy, shards};
}

std::string DescribeRestore(const std::optional<int64_t>& copy,
                            const std::optional<int64_t>& shards) {
  if (!copy && !shards) return "undecided";
  auto one = [](const std::optional<int64_t>& s) {
    return !s ? std::string("undecided") : *s < 0 ? std::string("none") : std::to_string(*s);
  };
  return "copy=" + one(copy) + " shards=" + one(shards);
}

std::vector<int> ReplicaOrder(const std::vector<std::string>& switch_paths, int group_rank) {
  const int n = static_cast<int>(switch_paths.size());
  std::vector<int> order;
  if (group_rank < 0 || group_rank >= n) return order;
  for (int i = 1; i < n; ++i) order.push_back((group_rank + i) % n);
  const std::string mine = NearestSwitch(switch_paths[static_cast<size_t>(group_rank)]);
  if (mine.empty()) return order;
  std::stable_partition(order.begin(), order.end(), [&](int r) {
    const std::string theirs = NearestSwitch(switch_paths[static_cast<size_t>(r)]);
    return !theirs.empty() && theirs != mine;
  });
  return order;
}

std::string TrimFlashInventory(std::vector<FlashCopy>& inventory) {
  size_t long_names = 0, steps_cut = 0, copies_cut = 0;
  std::erase_if(inventory, [&](const FlashCopy& c) {
    const bool cut = c.group.size() > kMaxFlashGroupBytes;
    long_names += cut ? 1 : 0;
    return cut;
  });
  for (FlashCopy& c : inventory) {
    std::sort(c.steps.begin(), c.steps.end(), std::greater<>());
    if (c.steps.size() > kMaxFlashSteps) {
      steps_cut += c.steps.size() - kMaxFlashSteps;
      c.steps.resize(kMaxFlashSteps);
    }
  }
  if (inventory.size() > kMaxFlashCopies) {
    copies_cut = inventory.size() - kMaxFlashCopies;
    inventory.resize(kMaxFlashCopies);
  }
  if (long_names + steps_cut + copies_cut == 0) return "";
  return std::to_string(copies_cut) + " copies beyond " + std::to_string(kMaxFlashCopies) + ", " +
         std::to_string(steps_cut) + " older steps beyond " + std::to_string(kMaxFlashSteps) +
         " per copy, " + std::to_string(long_names) + " group names over " +
         std::to_string(kMaxFlashGroupBytes) + " bytes left out";
}

}  // namespace ftrun::rendezvous
