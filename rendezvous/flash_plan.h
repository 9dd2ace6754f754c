// Flash checkpoint decisions the rendezvous makes for a round (ftrun-flash-checkpoint(7)):
//   * PlanRestore: the step the round restores from the members' memory, decided once for the
//     whole job from what each member's agent reports it holds (NodeInfo::flash), so ranks
//     never load different steps, and a restarted `ftrun master` learns the steps from the
//     agents as they (re)join.
//   * ReplicaOrder: where a node's replicas go, nodes under a different switch first.
//
// Pure functions: no I/O, no state. Inputs are bounded on the wire (CheckFlashLimits).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "rendezvous/job_state.h"

namespace ftrun::rendezvous {

// Bounds of one node's inventory: copies, steps per copy, bytes of a group name. The agent
// trims to them (TrimFlashInventory); the server refuses a join beyond them.
inline constexpr size_t kMaxFlashCopies = 1024;
inline constexpr size_t kMaxFlashSteps = 8;
inline constexpr size_t kMaxFlashGroupBytes = 64;

struct RestorePlan {
  // Newest step of the one copy "" that any member holds; -1: none. nullopt: undecided.
  std::optional<int64_t> copy;
  // Newest step at which rank-0 .. rank-(world_size-1) are all held by members (a copy whose
  // world size is known and differs does not count); -1: none. nullopt: undecided.
  std::optional<int64_t> shards;
};

// The round's restore plan from its members' inventories. Undecided (both nullopt) when a
// member does not report one: its memory is unknown, so the workers agree among themselves.
RestorePlan PlanRestore(const std::vector<const NodeInfo*>& members, int world_size);

// "copy=12 shards=none" ("undecided" when it is), for logs.
std::string DescribeRestore(const std::optional<int64_t>& copy,
                            const std::optional<int64_t>& shards);

// The other members' group ranks in the order the replicas of `group_rank`'s node go to them:
// members whose nearest switch (the first of the path) is known and differs from this node's
// first, then the others; within each part, group-rank order after this node, wrapping. With
// no topology known this is the plain order after this node. `switch_paths` in group-rank
// order.
std::vector<int> ReplicaOrder(const std::vector<std::string>& switch_paths, int group_rank);

// Keeps an inventory within the bounds above: the newest kMaxFlashSteps steps of each copy,
// the first kMaxFlashCopies copies, no copy with a longer group name. Returns what was cut
// ("" : nothing), for the agent's log.
std::string TrimFlashInventory(std::vector<FlashCopy>& inventory);

}  // namespace ftrun::rendezvous
