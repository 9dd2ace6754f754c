// RendezvousState: the one implementation of the job's rendezvous and restart semantics.
// Pure: no I/O, no threads, no clock; every call takes `now` and the caller reads the
// resulting views. The gRPC server, the in-process single-node coordinator and the tests
// all drive this class.
//
// Semantics (torchrun's, with the improvements of ftrun(1)):
// * A round forms from the joined nodes: at max_nodes at once; at >= min_nodes after
//   last_call_timeout (first round) or at once (a re-formation after a stop, whose members
//   are already there). Static rendezvous: exactly the node ranks 0..max-1, rank = node rank.
//   A round that cannot form within join_timeout fails the job.
// * Group ranks are stable: survivors of a round keep their order, newcomers follow.
// * A worker failure stops the round everywhere and spends one job-wide restart; with none
//   left the job fails. A node joining a running round below max_nodes, or a member lost,
//   stops the round without spending a restart; at max_nodes a newcomer waits as a spare.
// * A node is lost when silent for liveness_timeout, or disconnect_grace after its transport
//   reported it gone; lost nodes are forgotten (they may join again). A member whose transport
//   is gone while the round stops for worker failures is lost after kFailureDisconnectGrace
//   already: the failures are the evidence (a dead node breaks its peers' collectives), and
//   every moment waited is recovery time. A node answered (Answered) and not heard from
//   since is lost after max(disconnect_grace, kRewatchGrace), a member in a round stopping
//   for worker failures after kFailureRewatchGrace: a live agent watches again at once, and
//   one that died with no call in flight (just after an answer) leaves no transport to
//   report it gone.
// * The job succeeds when every member of the running round reported success.
// * Flash checkpoint: a round's assignment carries the step its workers restore from memory,
//   decided once as it forms from the members' inventories (NodeInfo::flash, refreshed by
//   every join and every stopped report that carries one; flash_plan.h), the order of
//   the members its replicas go to, and the run's start: the earliest NodeInfo::run_started_ms
//   of any join not refused (never raised), fixed for each round as it forms, so that its
//   members all go by the same time.
// * Rebuilding (a restarted server): nodes rejoining with the round their workers still run
//   (NodeInfo::running) make that round this server's, unchanged, once every group rank has
//   claimed it consistently: the workers never stop. Until then the claimants see their own
//   assignment, running, and reports wait (Rebuilding()); a missing rank after
//   liveness_timeout, a member rejoining without the claim, or claims that disagree give the
//   rebuild up, and the next round forms as usual (no restart spent).
//
// Thread: not thread-safe; one owner (the server's loop). Errors: Join returns a message that
// names both values of a mismatch; other calls ignore stale or unknown input.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "common/result.h"
#include "rendezvous/flash_plan.h"
#include "rendezvous/job_state.h"
#include "rendezvous/network_check_session.h"
#include "rendezvous/save_round.h"

namespace ftrun::rendezvous {

struct JobSpec {
  std::string run_id = "none";
  int min_nodes = 1;
  int max_nodes = 1;
  int nproc_per_node = 0;  // 0: whatever the first node says
  int max_restarts = 0;
  int node_unit = 1;          // a round's node count is a multiple of this (dlrover-run)
  bool static_ranks = false;  // static rendezvous: group rank = --node-rank
  std::string master_addr;    // static: every round's MASTER_ADDR
  Duration last_call_timeout{30};
  Duration join_timeout{600};
  std::string join_timeout_key = "join_timeout";  // the --rdzv-conf key it came from (errors)
  Duration liveness_timeout{15};
  Duration disconnect_grace{1};
  bool fault_save = true;       // a round that must stop first saves what it can
  Duration save_timeout{180};   // --save-timeout / TTP_OT
  Duration collect_timeout{5};  // how long to wait for the nodes' progress reports
  CheckSettings check;          // the pre-flight network check
  // Restart policy: the restarts a node causes within failure_window back off exponentially
  // (none before the first repeat: restart_backoff, then twice that, ... up to
  // restart_backoff_max; 0 turns it off), and a node that causes exclude_after of them is
  // left out of the next round while spares or --nnodes MIN allow (0: never).
  Duration restart_backoff{1};
  Duration restart_backoff_max{30};
  Duration failure_window{600};
  int exclude_after = 3;
  // The replica key members get in their assignment ("" : the server makes one; replica.proto).
  std::string replica_key;
};

// Why a Join was refused. kRetry: the node may try again later (its node rank is held by a
// node that is still alive).
struct JoinRefusal {
  enum class Kind { kMismatch, kRetry } kind = Kind::kMismatch;
  std::string message;
};

// Something that happened to the job, for logs and the event log (drained by TakeEvents):
// one struct per event.
enum class NodeEventKind { kJoined, kLeft, kLost, kExcluded };
// The event log's name of a node event: "node_joined", "node_left", "node_lost",
// "node_excluded".
const char* NodeEventName(NodeEventKind kind);
struct NodeEvent {
  NodeEventKind kind = NodeEventKind::kJoined;
  std::string node;
  std::string host;
  std::string why;  // lost, excluded: why ("" otherwise)
};
struct RoundFormed {
  std::vector<std::string> members;       // node ids in group-rank order
  std::vector<std::string> switch_paths;  // theirs, in the same order ("" : unknown)
  bool rebuilt = false;                   // taken over from the rejoining nodes' claims
  std::string restore;                    // the flash-checkpoint restore plan (DescribeRestore)
};
// A member cannot reach another member's store while both reach this server: the round stops
// (no restart spent) and the next one waits `wait` (doubling while the partition lasts).
struct Partition {
  std::string from;  // host names (and addresses)
  std::string to;
  int to_rank = 0;  // the group rank of `to`
  std::string error;
  Duration wait{0};
};
// The rejoining nodes' round could not be rebuilt; the next one forms instead.
struct RebuildGivenUp {
  uint64_t round = 0;
  std::string why;
};
struct NetworkCheckStarted {
  std::vector<std::string> members;
};
struct NetworkCheckFinished {
  std::string summary;  // "all nodes passed", "excluded <hosts>", "could not isolate <hosts>"
  NetworkCheckReport report;
};
// A node was lost while its round stopped for worker failures: the restart they took (or the
// job's end they would have caused) is given back.
struct RestartGivenBack {
  std::string host;
  int restart_count = 0;  // the job's count after it
};
using StateEvent = std::variant<NodeEvent, RoundFormed, NetworkCheckStarted, NetworkCheckFinished,
                                RestartGivenBack, RebuildGivenUp, Partition>;

class RendezvousState {
 public:
  RendezvousState(JobSpec spec, TimePoint now);

  const JobSpec& spec() const { return spec_; }
  // Increases whenever a view may change in substance (phase, round, assignment, restart,
  // reason, failures); not for progress counters, so watchers are not woken by every join.
  uint64_t version() const { return version_; }
  Phase phase() const { return phase_; }
  uint64_t round() const { return round_; }
  // Workers in the current round (0 before the first round forms).
  int world_size() const { return world_size_; }
  bool finished() const { return phase_ == Phase::kSucceeded || phase_ == Phase::kFailed; }
  // Rebuilding the rejoining nodes' round: their reports must wait until it is decided.
  bool Rebuilding() const { return rebuild_.has_value(); }
  size_t node_count() const { return nodes_.size(); }

  // Registers (or refreshes) a node. Idempotent for the same node_id.
  std::optional<JoinRefusal> Join(const NodeInfo& info, TimePoint now);
  // Any call from the node proves it alive.
  void Seen(const std::string& node_id, TimePoint now);
  // The node's transport went away; it is lost unless it calls within disconnect_grace.
  void Disconnected(const std::string& node_id, TimePoint now);
  // A call of the node was answered and it has none in flight (no watch pending): until it
  // calls again (Seen), the liveness rules above count the time.
  void Answered(const std::string& node_id, TimePoint now);
  void Leave(const std::string& node_id, TimePoint now);

  // Reports for `round`; stale rounds and unknown nodes are ignored.
  void ReportFailed(const std::string& node_id, uint64_t round,
                    const std::vector<WorkerFailure>& failures, TimePoint now);
  void ReportSucceeded(const std::string& node_id, uint64_t round, TimePoint now);
  // The node's workers of `round` have stopped; free_port is fresh for the next round, and
  // `flash` (when reported) the node's inventory for the next round's restore step. Both are
  // taken from a known node whatever the round: they describe it now.
  void ReportStopped(const std::string& node_id, uint64_t round, int free_port, TimePoint now,
                     const std::optional<std::vector<FlashCopy>>& flash = std::nullopt);

  // Ends the job as failed (e.g. the hosting agent is going away), so that every node learns
  // it at once.
  void Abort(const std::string& reason);
  std::vector<std::string> NodeIds() const;

  // Fault-time save: a node's ranks' progress, and a saver's (or the finalizer's) answer.
  void ReportProgress(const std::string& node_id, uint64_t round, uint64_t save_id,
                      const std::vector<RankProgress>& ranks, TimePoint now);
  void ReportSaved(const std::string& node_id, uint64_t round, uint64_t save_id, int rank,
                   bool finalize, bool ok, const std::string& error, TimePoint now);
  // rendezvous_state_partition.cc: the node cannot reach the store of the member of group rank
  // `peer_rank` in `round` (`error` says how it failed). A partition when that member still
  // reaches this server (its transport is not gone: else it is a lost node, not a partition).
  void ReportUnreachable(const std::string& node_id, uint64_t round, int peer_rank,
                         const std::string& error, TimePoint now);
  // Network check: a node's results for one order of the running check.
  void ReportCheck(const std::string& node_id, uint64_t round, uint64_t order_id,
                   const std::vector<CheckTaskResult>& results, TimePoint now);
  // The last finished network check (nullopt before the first).
  const std::optional<NetworkCheckReport>& last_check() const { return last_check_; }

  // A stack-dump order (rendezvous/stacks_board.h keeps the answers): every view carries
  // `id` from now on, and watchers are woken.
  void OrderStacks(uint64_t id) {
    stacks_id_ = id;
    Changed();
  }

  // Applies deadlines (last call, join timeout, liveness).
  void Tick(TimePoint now);
  static constexpr Duration kFailureDisconnectGrace{0.2};
  // How long an answered node has to call again: generous, as a slow agent, a loaded server
  // loop or a link retransmitting cost seconds (still a third of the default silence); in
  // a round stopping for worker failures (the evidence, as above) one second.
  static constexpr Duration kRewatchGrace{5};
  static constexpr Duration kFailureRewatchGrace{1};
  // When Tick should run next (there is always one while the job is not finished).
  std::optional<TimePoint> NextDeadline() const;

  NodeView View(const std::string& node_id) const;
  JobStatus Status(TimePoint now) const;
  // The events since the last call, oldest first.
  std::vector<StateEvent> TakeEvents() { return std::exchange(events_, {}); }
  bool IsNode(const std::string& node_id) const { return nodes_.count(node_id) != 0; }
  // The network check kept this node out of the job (its view says why).
  bool IsExcluded(const std::string& node_id) const { return excluded_.count(node_id) != 0; }

 private:
  // Declares lost the nodes that went silent or whose transport stayed gone (see above).
  void SweepLiveness(TimePoint now);
  struct Node {
    NodeInfo info;
    TimePoint last_seen;
    std::optional<TimePoint> disconnected_at;
    uint64_t join_seq = 0;
    std::optional<TimePoint> answered_at;  // a call of it answered, none pending (Answered)
  };

  void Changed() { ++version_; }
  // rendezvous_state_round.cc: forming a round (with FormingCandidates, PlacesClaimed).
  void StartForming(TimePoint now, bool reformation);
  void TryCompleteRound(TimePoint now);
  // How many of the joined nodes the next round takes: at most MAX, a multiple of node_unit.
  int RoundSize() const;
  // members_ in group-rank order, and the ranks and world size they make.
  void SetMembers(std::vector<std::string> members);
  void CompleteRound(TimePoint now);
  // The members' flash-checkpoint restore plan, decided as the round forms (flash_plan.h).
  void PlanRoundRestore();
  // rendezvous_state_check.cc: the pre-flight network check of a new round.
  void MaybeStartCheck(TimePoint now);
  void AfterCheckProgress(TimePoint now);
  void FinishCheck(TimePoint now);
  void AddCheckTo(NodeView& v, const std::string& node_id) const;
  // rendezvous_state_view.cc: the members' listening stores, for the partition check.
  void AddStorePeersTo(NodeView& v) const;
  // rendezvous_state_spare_check.cc: the check of the nodes waiting outside a running round.
  void MaybeCheckSpares(TimePoint now);
  void AfterSpareCheckProgress(TimePoint now);
  void FinishSpareCheck(TimePoint now);
  // A round forms: a spare check still running is dropped (the round's own check covers its
  // members), and a promoted spare whose check is older than spare_check_max_age is checked
  // again.
  void SparesPromoted(TimePoint now);
  void StopRound(const std::string& reason, TimePoint now);
  // What a stopping round does: save first (when enabled), then stop or fail.
  void StopOrFail(bool fail, const std::string& reason, std::vector<WorkerFailure> failures,
                  TimePoint now);
  void AfterSaveEvent(TimePoint now);
  std::vector<int> RanksOf(const std::string& node_id) const;
  void MaybeFinishStopping(TimePoint now);
  void Fail(const std::string& reason, std::vector<WorkerFailure> failures = {});
  void RemoveNode(const std::string& node_id, const std::string& why, TimePoint now);
  bool InRound(const std::string& node_id) const;
  std::vector<std::string> FormingCandidates() const;
  // FormingCandidates without an earlier round here: the places the nodes of `rest` (in
  // joining order) claim by their last_group_rank ("" where none), moved from `rest` to
  // `taken`; the first to join keeps a place two claim.
  std::vector<std::string> PlacesClaimed(
      std::vector<const std::pair<const std::string, Node>*>& rest,
      std::set<std::string>& taken) const;
  // A member was lost while its round stops for a worker failure: the failure followed from
  // the loss (a collective with the dead node), so the restart it took is given back.
  void BlameTheLoss(const std::string& host, const std::string& why);
  // A failure on `node_id` spent a restart: the back-off before the next round and whether
  // the node is left out of it. Returns what the stop's reason adds ("" : nothing).
  std::string ApplyRestartPolicy(const std::string& node_id, TimePoint now);
  // Leaves the nodes marked by ApplyRestartPolicy out, as the round re-forms.
  void ExcludeRepeatFailures();
  // rendezvous_state_rebuild.cc: a restarted server takes over the round the rejoining
  // nodes run. TakeClaim returns false when the claim is not taken (the node joins plainly).
  bool TakeClaim(const NodeInfo& info, TimePoint now);
  void AdoptRebuiltRound(TimePoint now);
  void GiveUpRebuild(const std::string& why, TimePoint now);
  // A node left or was lost while rebuilding.
  void RebuildNodeGone(const std::string& node_id, const std::string& why, TimePoint now);
  void AddRebuildTo(NodeView& v, const std::string& node_id) const;

  // The highest round a joining node may carry on from (NodeInfo::next_round, running).
  static constexpr uint64_t kMaxClaimedRound = 1'000'000;

  JobSpec spec_;
  uint64_t version_ = 1;
  Phase phase_ = Phase::kForming;
  uint64_t round_ = 0;
  int restart_count_ = 0;
  // Why the round stops, when a worker failure stopped it: whether it spent a restart (or
  // would have failed the job for want of one).
  enum class FailureStop { kNone, kSpent, kExhausted };
  FailureStop failure_stop_ = FailureStop::kNone;
  // Restart policy: when each node's failures spent restarts (within failure_window), the
  // node behind the current stop, the earliest the next round may form, and the nodes to
  // leave out of it.
  std::map<std::string, std::vector<TimePoint>> failure_times_;
  std::string failing_node_;
  std::optional<TimePoint> not_before_;
  std::map<std::string, std::string> to_exclude_;
  std::string reason_;
  std::vector<WorkerFailure> failures_;

  std::vector<StateEvent> events_;
  std::map<std::string, Node> nodes_;
  uint64_t next_join_seq_ = 0;
  std::vector<std::string> members_;    // the round, in group-rank order
  std::map<std::string, int> rank_of_;  // member -> group rank
  int alive_members_ = 0;               // members not lost since the round formed
  std::vector<int> base_rank_;          // per group rank
  int world_size_ = 0;
  std::string master_addr_;
  int master_port_ = 0;
  RestorePlan restore_;               // the round's flash-checkpoint restore step
  int64_t run_started_ms_ = 0;        // the earliest NodeInfo::run_started_ms seen (0: none)
  int64_t round_run_started_ms_ = 0;  // that when the round formed: what its members are told
  std::set<std::string> succeeded_;
  std::set<std::string> stopped_;

  // Saving.
  struct AfterSave {
    bool fail = false;
    std::string reason;
    std::vector<WorkerFailure> failures;
  };
  std::optional<SaveRound> save_;
  SaveRound::Stage save_stage_ = SaveRound::Stage::kDone;
  AfterSave after_save_;
  uint64_t next_save_id_ = 1;

  uint64_t stacks_id_ = 0;  // the newest stack-dump order

  // Checking.
  std::optional<NetworkCheckSession> check_;
  uint64_t next_check_order_ = 1;
  std::set<std::string> checked_;                // passed a check: not tested again
  std::map<std::string, std::string> excluded_;  // node -> why the check kept it out
  uint64_t check_id_ = 0;                        // finished checks
  std::optional<NetworkCheckReport> last_check_;
  // Nodes waiting outside the running round, checked against a checked member meanwhile.
  std::optional<NetworkCheckSession> spare_check_;
  std::map<std::string, TimePoint> spare_checked_at_;  // passed while waiting: when

  // Partitions detected within failure_window of each other (each doubles the wait before
  // the next round), and when the last one was.
  int partitions_ = 0;
  TimePoint last_partition_{};
  // Rebuilding: the first claim's round and shape, each group rank's claimant ("" : none
  // yet), their claims, and when to give up.
  struct Rebuild {
    NodeAssignment shape;
    std::vector<std::string> holders;
    std::map<std::string, NodeAssignment> claims;
    TimePoint deadline;
  };
  std::optional<Rebuild> rebuild_;

  // Forming.
  bool formed_any_ = false;  // this server formed a round: joiners' claims are no longer taken
  bool reformation_ = false;
  TimePoint forming_since_;
  std::optional<TimePoint> last_call_deadline_;
  TimePoint next_sweep_;
};

}  // namespace ftrun::rendezvous
