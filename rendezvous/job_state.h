// The job as the rendezvous server sees it, and what one node learns from it. Plain values,
// shared by the pure state machine, the gRPC adapters and the agents.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "rendezvous/assignment.h"

namespace ftrun::rendezvous {

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;
using Duration = std::chrono::duration<double>;

// Lifecycle of the job, the same for every node:
//   forming --round complete--> running --failure/membership change--> stopping
//   stopping --all members stopped--> forming (next round)
//   running --all members succeeded--> succeeded;  any --no restart left/too few nodes--> failed
// A running round that must stop (failure, node lost or joined) first goes through
//   saving: the surviving replicas save the newest consistent step (save_round.h).
enum class Phase { kForming, kRunning, kStopping, kSucceeded, kFailed, kSaving };
const char* PhaseName(Phase p);

// One failed worker, as reported by its agent (torchrun's ProcessFailure plus the host).
struct WorkerFailure {
  int local_rank = 0;
  int rank = 0;            // global rank
  int pid = 0;
  int exitcode = 0;        // exit code, or -signal
  std::string error_file;  // the path, or "<N/A>"
  std::string error_json;  // the error file's content (for the agent's own error file)
  std::string message;     // traceback, message, or torchrun's made-up text
  int64_t timestamp = 0;   // seconds since the epoch
  std::string host;
};

// What a rank last reported to its agent, gathered at fault time (save_planner.h).
struct RankProgress {
  int rank = 0;
  std::string group;       // replica group: ranks holding identical state ("" : all ranks)
  int64_t step = -1;       // last step whose update finished (or began, when updating)
  bool updating = false;   // between "update begin" and "update end"
  bool healthy = true;     // alive and not the failed/hung rank
  bool has_handler = false;
};

struct Saver {
  int rank = 0;
  std::string group;
};

// The fault-time save as every node sees it while the phase is saving.
struct SaveOrder {
  uint64_t id = 0;
  bool collecting = false;   // nodes report their ranks' progress
  int64_t step = -1;         // then: savers save this step ...
  std::vector<Saver> savers;
  bool finalize = false;     // ... then the finalizer completes the checkpoint
  int finalizer = -1;
};

// What a node joining the job says about itself.
struct NodeInfo {
  std::string node_id;    // unique per agent process: host, pid, random
  std::string addr;       // where other nodes reach it (MASTER_ADDR when it is group rank 0)
  std::string host;       // its name in reports
  int node_rank = -1;     // static rendezvous: --node-rank
  int nproc_per_node = 1;
  int free_port = 0;      // a port free on this node now: the round's MASTER_PORT if rank 0
};

// One node's view of the job, sent to it whenever the job changes.
struct NodeView {
  uint64_t version = 0;
  Phase phase = Phase::kForming;
  uint64_t round = 0;        // the round being formed, run or stopped
  int restart_count = 0;
  int max_restarts = 0;
  bool member = false;       // this node is in the round
  NodeAssignment assignment; // valid when member and phase is running or stopping
  int nodes_joined = 0;      // forming: nodes in the round so far; running: its size
  int nodes_waiting = 0;     // joined but not in the round
  std::string reason;        // why stopping / failed / succeeded
  std::vector<WorkerFailure> failures;  // the failures behind a restart or the job's failure
  std::optional<SaveOrder> save;        // phase saving
};

// For operators: one node as the server sees it.
struct NodeStatus {
  std::string node_id;
  std::string host;
  std::string addr;
  int node_rank = -1;
  int nproc_per_node = 0;
  int group_rank = -1;  // -1: outside the round
  int base_rank = -1;
  double silent_seconds = 0;
  bool disconnected = false;
};

struct JobStatus {
  std::string run_id;
  NodeView view;  // the job as a node outside the round sees it
  int min_nodes = 0;
  int max_nodes = 0;
  int world_size = 0;
  std::vector<NodeStatus> nodes;  // members in group-rank order, then the others
};

}  // namespace ftrun::rendezvous
