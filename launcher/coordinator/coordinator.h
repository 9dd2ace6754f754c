// Coordinator: the agent's view of the job. It forms rounds (rendezvous), decides whether a
// failure restarts the job or ends it, and tells the agent. The single-node implementation
// decides locally; the multi-node ones ask the rendezvous server. Either way the agent only
// reacts to these events, so the same agent code runs everywhere.
//
// Thread: loop only; every Listener call happens on the loop, never from inside a
// Coordinator call (they are posted). Ownership: the listener passed to Start() must outlive
// the coordinator (the agent owns its coordinator). Errors: a coordinator never throws and
// has no error returns; what ends the job (a refusal, the server lost for good, the restart
// budget spent) reaches the listener as OnJobFinished with the reason.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "launcher/workers/failure_report.h"
#include "rendezvous/assignment.h"
#include "rendezvous/job_state.h"
#include "rendezvous/rendezvous_client.h"

namespace ftrun::launcher {

struct JobResult {
  bool succeeded = false;
  std::vector<WorkerFailure> failures;  // the job's failures, for the root-cause summary
  std::string reason;                   // one line, e.g. "restarts exhausted (3/3)"
};

class Coordinator {
 public:
  class Listener {
   public:
    virtual ~Listener() = default;
    // A round formed: start this node's workers for it.
    virtual void OnRoundStarted(const rendezvous::NodeAssignment& assignment) = 0;
    // Stop this node's workers, then call WorkersStopped().
    virtual void OnRestartRequested(const std::string& reason) = 0;
    // The job is over; stop any workers and exit with the job's outcome.
    virtual void OnJobFinished(const JobResult& result) = 0;
    // The round saves before it stops (rendezvous::SaveOrder): report this node's ranks'
    // progress while collecting, then forward "save"/"finalize" to this node's chosen ranks.
    virtual void OnSaveOrder(uint64_t round, const rendezvous::SaveOrder& order) = 0;
    // The round is stopping (saving first, or not) and why; for logs and the event log.
    virtual void OnRoundStopping(uint64_t /*round*/, const std::string& /*reason*/,
                                 int /*restart_count*/) {}
    // Network check (phase checking): this node's part of the current wave; run it, then
    // ReportCheck. Once per order.
    virtual void OnCheckOrder(uint64_t /*round*/, const rendezvous::CheckOrder& /*order*/) {}
    // A network check finished: its results table and event-log record, once per check.
    virtual void OnCheckFinished(uint64_t /*check_id*/, const std::vector<std::string>& /*table*/,
                                 const std::string& /*json*/) {}
    // The network check keeps this node out of the job: stop and exit saying why.
    virtual void OnExcluded(const std::string& /*reason*/) {}
    // This node has joined, but round `round` runs without it: a spare (beyond --nnodes MAX)
    // waits to take a lost node's place. Once per round.
    virtual void OnWaitingAsSpare(uint64_t /*round*/) {}
    // Likewise, but below MAX: the node waits for enough nodes to make a whole --node-unit
    // (or for a lost node's place). Not a spare. Once per round.
    virtual void OnWaitingForNodeUnit(uint64_t /*round*/) {}
    // A job-wide stack-dump order (`ftrun status --stacks`, or a hang seen by some agent):
    // collect this node's ranks' stacks, then ReportStacks(stacks_id, ...). Once per order.
    virtual void OnStacksOrder(uint64_t /*round*/, uint64_t /*stacks_id*/) {}
  };

  virtual ~Coordinator() = default;
  // Joins the job; the first OnRoundStarted follows when the round forms.
  virtual void Start(Listener* listener) = 0;
  // This node's workers have all exited after OnRestartRequested or a failure. Repeats are
  // ignored (the agent may say it again when asked to stop with no workers running).
  virtual void WorkersStopped() = 0;

  // Reports to the rendezvous, in the order they are made; each becomes one RoundReport for
  // the round this node's workers ran (the check's: the round being formed).
  // A local worker failed (the agent stops or holds the others).
  void WorkersFailed(const std::vector<WorkerFailure>& failures);
  // Every worker of this node exited 0.
  void WorkersSucceeded();
  // Fault-time save: this node's ranks' progress, and a saver's answer.
  void ReportProgress(uint64_t save_id, const std::vector<rendezvous::RankProgress>& ranks);
  void ReportSaved(uint64_t save_id, int rank, bool finalize, bool ok, const std::string& error);
  // Network check: this node's results for one order.
  void ReportCheck(uint64_t order_id, const std::vector<rendezvous::CheckTaskResult>& results);
  // Stack dump: this node's ranks' stacks for order `stacks_id`.
  void ReportStacks(uint64_t stacks_id, std::vector<rendezvous::RankStack> stacks);

  // Every rank's stacks, job-wide: orders a dump on every member and calls `done` on the loop
  // with what they answered within `wait` (job_wide true). Coordinators without a
  // rendezvous server to ask (single node, etcd) call it at once with job_wide false: the
  // agent then collects its own ranks.
  using GatherDone = std::function<void(bool job_wide, const rendezvous::RpcOutcome&,
                                        const rendezvous::StacksCollection&)>;
  virtual void GatherJobStacks(rendezvous::Duration wait, GatherDone done);

  // The agent is going away (a signal): leave the job, cancel every pending operation.
  virtual void Shutdown() = 0;
  // Prometheus text of a rendezvous server hosted here ("" when none).
  virtual std::string ServerMetrics() const { return ""; }
  // Whether this agent serves the job's rendezvous (single node: always).
  virtual bool HostsRendezvous() const = 0;

  // Flash checkpoint: what this node's agent holds in memory, asked for at every join to the
  // rendezvous (the built-in server's or etcd's) and for every stopped report, so the round's
  // restore step is decided from it (rendezvous/flash_plan.h). Unset: nothing is reported.
  // The single-node coordinator ignores it (its ranks agree among themselves).
  using FlashInventory = std::function<std::vector<rendezvous::FlashCopy>()>;
  void SetFlashInventory(FlashInventory inventory) { flash_inventory_ = std::move(inventory); }
  // When this run of the job began as this agent knows it (ms since the epoch): its own start,
  // lowered to what a round says (NodeAssignment::run_started_ms). Sent with every join
  // (NodeInfo::run_started_ms), so that a restarted server learns the job's back. The
  // single-node coordinator has no server to tell (no other agent stores with this one).
  void SetRunStarted(int64_t ms) { run_started_ms_ = ms; }

 protected:
  // Delivers one report; `report.round` is 0 and the implementation sets it.
  virtual void Report(rendezvous::RoundReport report) = 0;

  // The inventory into a join's record (NodeInfo::flash), trimmed to the wire's bounds with
  // a warning saying what was cut; left as it is when no inventory is set.
  void TakeFlashInventory(rendezvous::NodeInfo& node) const;
  // The stopped report of `round`, carrying the inventory as the workers left it.
  rendezvous::RoundReport StoppedReport(uint64_t round) const;
  int64_t run_started_ms() const { return run_started_ms_; }

 private:
  std::optional<std::vector<rendezvous::FlashCopy>> TrimmedFlashInventory() const;

  FlashInventory flash_inventory_;
  int64_t run_started_ms_ = 0;
};

}  // namespace ftrun::launcher
