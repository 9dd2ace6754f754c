// Agent: the per-node lifecycle, as one state machine (agent_state.h has the diagram). It
// joins the job through a Coordinator, starts this node's workers for each round, watches
// them (a child's exit is an event, seen at once), stops them on failure, restart or signal,
// and ends with torchrun's exit code:
//   0 every worker succeeded; 1 the job failed or a forwarded signal stopped it;
//   kExitExcluded (75) a pre-flight check keeps this node out; kExitNotRetryable (70) the job
//   failed and restarting cannot help (fault_record.h).
//
// The path of a fault: WorkerGroup reports the exit -> OnWorkerExit -> OnLocalFailure tells
// the coordinator and either holds the survivors for the fault-time save (SaveRelay) or
// stops the group -> the group's exit -> WorkersStopped -> the coordinator's next round ->
// OnRoundStarted starts the new group.
//
// Collaborators, each in its own file: WorkerChannels (control channel, watchdog FIFO),
// FlashService (memory snapshots), SaveRelay (fault-time save), HangDetector (--hang-timeout),
// PreflightDriver (switchbox and network checks), AgentEvents (event log), AgentMetrics
// (--metrics-port); outcome.h reports the end. Processes come from the injected Spawner and time
// from the injected Clock, so unit tests drive every transition without real processes.
//
// Thread: loop only (the io_context passed in). Run() drives the loop until the job is over.
// Ownership: owns the coordinator, the planner, its collaborators and the worker group; the
// io_context, config, spawner and clock outlive it. Errors: none escape; a worker's crash or
// a lost node is ordinary business, and what ends the job ends up in exit_code().
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>

#include "common/clock.h"
#include "common/environment.h"
#include "common/event_log.h"
#include "launcher/agent/agent_events.h"
#include "launcher/agent/agent_metrics.h"
#include "launcher/agent/agent_state.h"
#include "launcher/agent/fault_record.h"
#include "launcher/agent/hang_detector.h"
#include "launcher/agent/preflight_driver.h"
#include "launcher/agent/save_relay.h"
#include "launcher/agent/stack_dumps.h"
#include "launcher/agent/worker_channels.h"
#include "launcher/checkpoint/flash_service.h"
#include "launcher/config/launch_config.h"
#include "launcher/coordinator/coordinator.h"
#include "launcher/replica/replica_service.h"
#include "launcher/workers/spawner.h"
#include "launcher/workers/worker_group.h"
#include "launcher/workers/worker_plan.h"
#include "store/store_server.h"

namespace ftrun::launcher {

// The exit code of an agent whose node a pre-flight check keeps out of the job (a faulty
// node, or an excluded straggler): the scheduler should replace the host (EX_TEMPFAIL).
inline constexpr int kExitExcluded = 75;

struct AgentOptions {
  const LaunchConfig* config = nullptr;    // required; outlives the agent
  EnvMap agent_env;                        // ftrun's environment, OMP_NUM_THREADS rule applied
  std::shared_future<std::string> host;    // required: this host's name (may still resolve)
  std::unique_ptr<WorkerPlanner> planner;  // required: what runs each round
  std::string watchdog_fifo;               // serve torch's FileTimerClient requests ("" = off)
  std::shared_ptr<EventLog> events;        // --event-log (may be null)
  // Where the post-mortem page goes after a job with faults ("" : none); the agent names it in
  // its log before the failure summary (whose last line personalities keep last), and the
  // caller writes it once Run() is over.
  std::string report_path;
  // Both run on the loop: the exit code after a forwarded signal (default: 1), and once,
  // right after the first workers started (e.g. the demo's progress line).
  std::function<int(int sig)> signal_exit_code;
  std::function<void()> on_workers_started;
  // Where merged stacks are written: <log dir>/<run dir>/stacks ("" : $TMPDIR/ftrun-stacks).
  std::string stacks_dir;
  // The workers' c10d store (agent_store.h; null: none). The agent drops the stopped
  // workers' keys before it reports them stopped, and stops the store when it finishes.
  std::unique_ptr<store::StoreServer> store;
  // Flash-checkpoint replicas (MakeReplicaService; null: none), already listening: the agent
  // copies committed shard snapshots out through it and serves restores from its copies.
  std::unique_ptr<ReplicaService> replicas;
  // Seams (null: real processes, real time). They must outlive the agent.
  Spawner* spawner = nullptr;
  Clock* clock = nullptr;
};

class Agent : public Coordinator::Listener {
 public:
  Agent(boost::asio::io_context& io, AgentOptions options,
        std::unique_ptr<Coordinator> coordinator);
  ~Agent() override;
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Runs the job; returns the exit code. The failure summary (if any) is on stderr.
  int Run();
  // Run() without driving the loop (tests drive it): sets up the channels and joins.
  // Returns false when set-up failed (then state() is kFinished, exit_code() 1; the error
  // is logged).
  bool Start();

  AgentState state() const { return state_; }
  int exit_code() const { return exit_code_; }
  // A worker of this node failed, or the job restarted (more than one round here).
  bool had_faults() const {
    for (const auto& a : history_.attempts()) {
      if (!a.failures.empty()) return true;
    }
    return history_.attempts().size() > 1;
  }
  std::string RenderMetrics() const { return metrics_.Render(); }

  // Coordinator::Listener
  void OnRoundStarted(const rendezvous::NodeAssignment& assignment) override;
  void OnRestartRequested(const std::string& reason) override;
  void OnJobFinished(const JobResult& result) override;
  void OnSaveOrder(uint64_t round, const rendezvous::SaveOrder& order) override;
  void OnRoundStopping(uint64_t round, const std::string& reason, int restart_count) override;
  void OnCheckOrder(uint64_t round, const rendezvous::CheckOrder& order) override;
  void OnCheckFinished(uint64_t check_id, const std::vector<std::string>& table,
                       const std::string& json) override;
  void OnExcluded(const std::string& reason) override;
  void OnWaitingAsSpare(uint64_t round) override;
  void OnWaitingForNodeUnit(uint64_t round) override;
  void OnStacksOrder(uint64_t round, uint64_t stacks_id) override;

 private:
  // Every change of state_ goes through here (and is logged).
  void Enter(AgentState next, const char* why);
  void OnWorkerExit(const WorkerGroup::Worker& w);
  void OnLocalFailure(const WorkerFailure& failure);
  void OnGroupExited();
  // `survivors_may_save`: with --survivor-grace (msrun + MindIO TTP) the surviving ranks
  // first get that long to save and exit by themselves.
  void StopGroup(int sig, AfterStop after, bool survivors_may_save = false);
  void EndSurvivorGrace();
  void WaitForSignal();
  void OnSignal(int sig);
  void ExitExcluded(const std::string& reason);
  // Outside the running round (a spare, or waiting for a --node-unit): with --warm-restart,
  // the standbys for the workers this node would start get ready now.
  void PrepareOutsideRound(uint64_t round);
  void Finish(int exit_code);
  // What the fault record says besides the history.
  FaultRecordContext FaultContext() const;
  // The newest step a local rank reported (`completed`: not counting a step whose update is
  // under way), and the newest memory snapshot (nullopt: none).
  std::optional<int64_t> NewestStep(bool completed) const;
  std::optional<int64_t> NewestSnapshot() const;
  // Start() could not open what the user asked for: finished with exit code 1.
  bool SetUpFailed(const Error& error);
  // What the ranks say on the control channel, routed to the collaborators.
  ControlServer::Events ChannelEvents();
  // A round's start of the job's run (ms since the epoch; 0: its server does not say): the
  // earliest agent's, kept by this agent and its collaborators from now on.
  void LearnRunStarted(int64_t ms);

  boost::asio::io_context& io_;
  AgentOptions opts_;
  const LaunchConfig& config_;
  std::unique_ptr<Spawner> own_spawner_;
  std::unique_ptr<Clock> own_clock_;
  Spawner& spawner_;
  Clock& clock_;
  std::unique_ptr<Coordinator> coordinator_;
  boost::asio::signal_set signals_;
  AgentEvents events_;
  AgentMetrics metrics_;
  // When this run began, for what a checkpoint directory holds from earlier runs (FlashService)
  // and the ranks' loads (FTRUN_RUN_STARTED): wall time, as files' times are, 2 s before the
  // agent started, since files are stamped by a coarse clock (or a file server's); lowered to
  // the job's (the earliest agent's) when a round says it (LearnRunStarted).
  std::chrono::system_clock::time_point run_started_ =
      std::chrono::system_clock::now() - std::chrono::seconds(2);
  WorkerChannels channels_;
  FlashService flash_;  // memory snapshots of the ranks' state (flash checkpoint)
  SaveRelay relay_;
  StackDumps stacks_;  // merged stacks of a hang, and the job's stack-dump orders
  HangDetector hangs_;
  PreflightDriver preflight_;
  std::unique_ptr<Timer> fault_timer_;  // the save deadline, or the survivors' grace

  // State below is touched only on the loop.
  AgentState state_ = AgentState::kWaiting;
  AfterStop after_stop_ = AfterStop::kNothing;
  std::unique_ptr<WorkerGroup> group_;
  int grace_signal_ = 0;  // sent when the survivors' grace ends
  std::optional<JobResult> result_;
  std::string failure_report_;  // printed once the loop has stopped (Run)
  int stop_signal_ = 0;         // the forwarded signal that is stopping the job, if any
  bool ever_started_ = false;
  int exit_code_ = 1;
  FaultHistory history_;     // the job's faults as this node saw them (fault_record.json)
  std::string attempt_dir_;  // the newest attempt's log directory ("" : no logs)
};

}  // namespace ftrun::launcher
