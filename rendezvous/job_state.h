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

inline TimePoint After(TimePoint t, Duration d) {
  return t + std::chrono::duration_cast<Clock::duration>(d);
}

// "1.5s", "30s": a duration as the rendezvous's messages print it.
inline std::string SecondsText(Duration d) {
  std::string s = std::to_string(d.count());
  s.erase(s.find_last_not_of('0') + 1);
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s + "s";
}

// Lifecycle of the job, the same for every node:
//   forming --round complete--> [checking -->] running --failure/membership change--> stopping
// With the pre-flight network check a round that has a node not checked yet is first
//   checking: the agents test each other pairwise; faulty nodes leave the round.
//   stopping --all members stopped--> forming (next round)
//   running --all members succeeded--> succeeded;  any --no restart left/too few nodes--> failed
// A running round that must stop (failure, node lost or joined) first goes through
//   saving: the surviving replicas save the newest consistent step (save_round.h).
// PhaseName names them in this order.
enum class Phase { kForming, kRunning, kStopping, kSucceeded, kFailed, kSaving, kChecking };
const char* PhaseName(Phase p);

// One failed worker, as reported by its agent (torchrun's ProcessFailure plus the host).
struct WorkerFailure {
  int local_rank = 0;
  int rank = 0;  // global rank
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
  std::string group;      // replica group: ranks holding identical state ("" : all ranks)
  int64_t step = -1;      // last step whose update finished (or began, when updating)
  bool updating = false;  // between "update begin" and "update end"
  bool healthy = true;    // alive and not the failed/hung rank
  bool has_handler = false;
};

struct Saver {
  int rank = 0;
  std::string group;
};

// The fault-time save as every node sees it while the phase is saving.
struct SaveOrder {
  uint64_t id = 0;
  bool collecting = false;  // nodes report their ranks' progress
  int64_t step = -1;        // then: savers save this step ...
  std::vector<Saver> savers;
  bool finalize = false;  // ... then the finalizer completes the checkpoint
  int finalizer = -1;
};

// The pre-flight network check (--network-check), as the job's server runs it.
struct CheckSettings {
  bool enabled = false;
  uint64_t bytes = uint64_t{64} << 20;  // each way, per pair
  Duration pair_timeout{60};            // a pair's probe (and its command, each)
  double straggler_fraction = 0.5;      // of the median bandwidth; 0: no straggler detection
  double min_bandwidth_mbps = 0;        // a pair below fails; 0: no minimum
  bool exclude_stragglers = false;
  bool run_command = false;  // the agents also run a 2-process job per pair
  // A node waiting outside the running round is checked while it waits (against a checked
  // member, probe only); at its promotion it is checked again only when that check is older
  // than this.
  Duration spare_check_max_age{600};
};

// One pair this node takes part in during the current wave. The client (b) connects to the
// listener (a) and measures; with run_command both run the check command as ranks 0 (a) and
// 1 (b) of a 2-process job whose rendezvous is master_addr:master_port (a's).
struct CheckTask {
  int index = 0;          // the pair, for the report
  std::string peer;       // the partner's node id
  std::string peer_host;  // ... its name, for messages
  bool client = false;
  std::string peer_addr;  // client: where the listener's probe is
  int peer_port = 0;
  std::string master_addr;
  int master_port = 0;
};

struct CheckOrder {
  uint64_t id = 0;  // one per wave: a report names it
  int round = 0;    // 0 or 1
  int wave = 0;
  uint64_t bytes = 0;
  Duration timeout{60};
  bool run_command = false;
  std::vector<CheckTask> tasks;  // empty: this node waits for the others
  std::string probe_key;         // the check's, for the pair probes (pair_probe.h)
};

// What a node reports for one task of an order.
struct CheckTaskResult {
  int index = 0;
  bool probed = false;  // the client's measurement is in
  bool probe_ok = false;
  std::string reason;  // why it failed, naming the peer
  double mbps_ab = 0;  // listener -> client
  double mbps_ba = 0;  // client -> listener
  double rtt_ms = 0;
  bool ran_command = false;
  bool command_ok = false;
  std::string command_reason;
  double command_seconds = 0;
};

// What a node joining the job says about itself.
// kUnreachable: this node cannot reach a member's store (a partition; `details.error`,
// `details.unreachable_rank`).
// One rank's stacks, as its agent collected them (launcher/diagnostics/stack_collector.h).
struct RankStack {
  int rank = -1;
  std::string host;
  int pid = 0;
  std::string python;  // faulthandler's dump ("" : none)
  std::string native;  // eu-stack's output ("" : none)
  std::string note;    // why a part is missing
};

// What the nodes answered to one stack-dump order.
struct StacksCollection {
  uint64_t id = 0;
  bool complete = false;             // every member of the round answered
  std::vector<RankStack> stacks;     // by rank
  std::vector<std::string> missing;  // hosts that did not answer (yet)
  int left_out = 0;                  // ranks left out for the size bound
};

enum class ReportKind {
  kFailed,
  kSucceeded,
  kStopped,
  kProgress,
  kSaved,
  kChecked,
  kUnreachable,
  kStacks
};

// What a report carries besides failures: the fault-time save's part (kProgress, kSaved) or
// the network check's (kChecked).
struct ReportDetails {
  // (Every member has an initializer, so that designated initializers may leave any out.)
  uint64_t save_id = 0;
  std::vector<RankProgress> progress{};  // kProgress
  int rank = -1;                         // kSaved: the saver
  bool finalize = false;
  bool ok = false;
  std::string error{};
  uint64_t check_id = 0;  // kChecked: the order
  std::vector<CheckTaskResult> check_results{};
  uint64_t stacks_id = 0;  // kStacks: the order
  std::vector<RankStack> stacks{};
  int unreachable_rank = 0;  // kUnreachable: the group rank whose store this node cannot reach
};

// The complete snapshots of one flash-checkpoint copy a node's agent holds in memory
// ("" : the one copy of a DDP job, "rank-<r>": a shard), newest first; world_size 0: unknown.
struct FlashCopy {
  std::string group;
  int world_size = 0;
  std::vector<int64_t> steps;
  bool operator==(const FlashCopy&) const = default;
};

// One report of a node about `round`: its workers failed (with the failures), succeeded or
// stopped, or its part of a fault-time save or a network check. The same value goes over
// the wire (RendezvousClient::Report) or straight into an in-process state machine.
struct RoundReport {
  ReportKind kind = ReportKind::kSucceeded;
  uint64_t round = 0;
  std::vector<WorkerFailure> failures;  // kFailed
  int free_port = 0;                    // kStopped: a port for the next round's master
  // kStopped: the agent's flash-checkpoint inventory now (its workers' last saves counted);
  // nullopt: not reported, the node's inventory stays as its join left it.
  std::optional<std::vector<FlashCopy>> flash;
  ReportDetails details;

  static RoundReport Of(ReportKind kind, uint64_t round = 0) {
    RoundReport r;
    r.kind = kind;
    r.round = round;
    return r;
  }
};

struct NodeInfo {
  std::string node_id;  // unique per agent process: host, pid, random
  std::string addr;     // where other nodes reach it (MASTER_ADDR when it is group rank 0)
  std::string host;     // its name in reports
  int node_rank = -1;   // static rendezvous: --node-rank; dynamic: the rank it declares, if any
  int nproc_per_node = 1;
  int free_port = 0;        // a port free on this node now: the round's MASTER_PORT if rank 0
  int probe_port = 0;       // its network-check probe listens here (0: none)
  uint64_t next_round = 0;  // rejoining a restarted server: the round after its last one
  int restart_count = 0;    // and the restarts the job had spent (carried on while forming)
  std::string switch_path;  // the switches above it, nearest first ("asw-3/psw-0"; topology.h)
  int replica_port = 0;     // its flash-checkpoint replica service listens here (0: none)
  // Rejoining a restarted server while its workers run (or just ran) a round: their
  // assignment, from which the server rebuilds that round (RendezvousState, rebuilding).
  std::optional<NodeAssignment> running;
  bool store_listens = false;  // free_port is its agent's store, listening for the whole job
  // Its group rank in the last round it ran (-1: none): a leader that takes over in etcd and
  // knows no earlier round keeps the survivors' ranks where it can (FormingCandidates).
  int last_group_rank = -1;
  // Its agent's flash-checkpoint inventory; flash_reported false: it does not report one.
  std::vector<FlashCopy> flash;
  bool flash_reported = false;
  // When this run of the job began as the node knows it (ms since the epoch; 0: unknown).
  int64_t run_started_ms = 0;
  // Not on the wire; the state machine's: `flash` says what the node holds now, read while
  // its workers could not save (a join claiming no running round, or a stopped report).
  // Cleared when a round starts with it: from then on its workers save newer steps and let
  // older ones go.
  bool flash_current = false;
};

// One node's view of the job, sent to it whenever the job changes.
// A member's store, as the round's other members reach it (the partition check).
struct StorePeer {
  int group_rank = 0;
  std::string addr;  // group rank 0: MASTER_ADDR
  int port = 0;      // group rank 0: MASTER_PORT
};

struct NodeView {
  uint64_t version = 0;
  Phase phase = Phase::kForming;
  uint64_t round = 0;  // the round being formed, run or stopped
  int restart_count = 0;
  int max_restarts = 0;
  bool member = false;        // this node is in the round
  NodeAssignment assignment;  // valid when member and phase is running or stopping
  int nodes_joined = 0;       // forming: nodes in the round so far; running: its size
  int nodes_waiting = 0;      // joined but not in the round (spares included)
  // Of those, the spares: nodes beyond --nnodes MAX, waiting to take a lost node's place. The
  // others wait for enough nodes to make a whole --node-unit.
  int nodes_spare = 0;
  bool spare = false;                    // this node is one of them (phase not forming)
  std::string reason;                    // why stopping / failed / succeeded
  std::vector<WorkerFailure> failures;   // the failures behind a restart or the job's failure
  std::optional<SaveOrder> save;         // phase saving
  std::optional<CheckOrder> check;       // phase checking: this node's part of the wave
  std::string excluded;                  // the network check keeps this node out: why
  uint64_t check_id = 0;                 // the last finished check (0: none) ...
  std::vector<std::string> check_table;  // ... its results table, for every agent's log
  std::string check_json;                // ... and its event-log record
  uint64_t stacks_id = 0;                // the newest stack-dump order (0: none)
  std::vector<StorePeer> store_peers;    // running members: the members' listening stores
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
  std::string switch_path;
  bool spare = false;  // outside the round, beyond --nnodes MAX (else: member, or waiting)
};

struct JobStatus {
  std::string run_id;
  NodeView view;  // the job as a node outside the round sees it
  int min_nodes = 0;
  int max_nodes = 0;
  int world_size = 0;
  std::vector<NodeStatus> nodes;           // members in group-rank order, then the others
  std::optional<StacksCollection> stacks;  // when the request asked for stacks
};

// What `ftrun status` asks beyond the job's state: a stack dump, or what one collected.
struct StatusQuery {
  bool dump_stacks = false;
  uint64_t stacks_id = 0;  // 0: the newest order
  bool wants_stacks() const { return dump_stacks || stacks_id != 0; }
};

}  // namespace ftrun::rendezvous
