// FlashInventory: what this node's agent holds in memory for flash checkpoint, as reported
// to the rendezvous (NodeInfo::flash; rendezvous/flash_plan.h decides the restore step from
// every member's): per copy ("" or "rank-<r>"), the complete steps of the local ranks'
// snapshots (with the world size they were saved with) and of the replicas kept for other
// nodes (world size unknown: 0). Not trimmed (the coordinator trims to the wire's bounds).
//
// Thread: loop only (reads the stores). Errors: none.
#pragma once

#include <vector>

#include "launcher/checkpoint/snapshot_store.h"
#include "launcher/replica/replica_store.h"
#include "rendezvous/job_state.h"

namespace ftrun::launcher {

// `replicas` may be null (this node keeps none).
std::vector<rendezvous::FlashCopy> FlashInventory(const SnapshotStore& snapshots,
                                                  const ReplicaStore* replicas);

}  // namespace ftrun::launcher
