// What a completed rendezvous round decided for one node: the numbers torchrun puts in the
// worker environment (GROUP_RANK, WORLD_SIZE, MASTER_ADDR, ...). A plain value.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ftrun::rendezvous {

struct NodeAssignment {
  uint64_t round = 0;        // increases with every new round of the job
  int restart_count = 0;     // job-wide TORCHELASTIC_RESTART_COUNT
  int max_restarts = 0;      // the job's --max-restarts (TORCHELASTIC_MAX_RESTARTS)
  int group_rank = 0;        // this node's rank among the nodes of the round
  int group_world_size = 1;  // nodes in the round
  int base_rank = 0;         // global RANK of this node's local rank 0
  int world_size = 1;        // workers in the round
  std::string master_addr;   // where worker rank 0 hosts torch's TCPStore
  int master_port = 0;
  // Flash-checkpoint replicas: the job's key for the replica channel, and every member's
  // replica endpoint ("host:port", "" for none) in group-rank order (empty: no replicas).
  std::string replica_key;
  std::vector<std::string> replica_peers;
  // Flash checkpoint: the step the round restores from memory (rendezvous/flash_plan.h), of
  // the one copy "" and of the shards; -1: none in memory; nullopt: not decided.
  std::optional<int64_t> restore_copy;
  std::optional<int64_t> restore_shards;
  // The other members' group ranks, in the order this node's replicas go to them (empty:
  // the agent's own order).
  std::vector<int> replica_order;
  // When this run of the job began: the earliest start any node that joined reported (ms since
  // the epoch; 0: unknown). Checkpoints stored before it are an earlier run's.
  int64_t run_started_ms = 0;
};

}  // namespace ftrun::rendezvous
