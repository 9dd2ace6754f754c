// Agent: the per-node lifecycle. Joins the job through a Coordinator, starts this node's
// workers for each round, watches them (a child's exit is an event, seen at once), stops
// them on failure, restart or signal, and ends with torchrun's exit code:
//   0 every worker succeeded; 1 the job failed or a forwarded signal stopped it;
//   kExitExcluded (75) a pre-flight check keeps this node out.
// With the control channel (control_server.h), a failure does not stop the surviving local
// ranks at once when some of them can save: the round first saves (OnSaveOrder), and
// --hang-timeout turns a rank that stopped reporting progress into a failure.
//
//   waiting --round--> running --failure/restart--> stopping --stopped--> waiting ...
//                         |                            |
//                         +--success/finished--------> finished (exit code known)
//
// Thread: loop only (the io_context passed in). Run() drives the loop until the job is over.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <csignal>
#include <map>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "launcher/coordinator/coordinator.h"
#include "launcher/channels/control_server.h"
#include "common/environment.h"
#include "launcher/channels/file_timer_server.h"
#include "launcher/config/launch_config.h"
#include "launcher/netcheck/check_runner.h"
#include "launcher/netcheck/switchbox.h"
#include "launcher/workers/worker_group.h"
#include "launcher/workers/worker_plan.h"
#include "common/event_log.h"
#include "common/metrics_server.h"

namespace ftrun::launcher {

// The exit code of an agent whose node a pre-flight check keeps out of the job (a faulty
// node, or an excluded straggler): the scheduler should replace the host (EX_TEMPFAIL).
inline constexpr int kExitExcluded = 75;

struct AgentOptions {
  const LaunchConfig* config = nullptr;
  EnvMap agent_env;  // ftrun's environment, OMP_NUM_THREADS rule applied
  std::shared_future<std::string> host;  // this host's name, for failure reports
  std::unique_ptr<WorkerPlanner> planner;  // what runs each round (torchrun or msrun)
  std::string watchdog_fifo;  // serve torch's FileTimerClient requests here ("" = off)
  std::shared_ptr<EventLog> events;  // --event-log (may be null)
  std::function<int(int sig)> signal_exit_code;  // after a forwarded signal (default: 1)
  std::function<void()> on_workers_started;      // once, when the first workers started
};

// What --metrics-port shows about this agent.
struct AgentMetrics {
  int rounds = 0;
  int restart_count = 0;
  int worker_failures = 0;
  int members = 0;
  int world_size = 0;
  double last_fault_time = 0;       // seconds since the epoch
  double time_to_recover = -1;      // last fault -> next round's workers started, seconds
  int saves_ok = 0;
  int saves_failed = 0;
  double last_save_duration = -1;   // order -> acknowledgement, seconds
  std::chrono::steady_clock::time_point fault_at{};
  std::map<uint64_t, std::chrono::steady_clock::time_point> save_ordered_at;
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

  // Prometheus text for --metrics-port (loop only).
  std::string RenderMetrics() const;

 private:
  enum class State { kWaiting, kRunning, kStopping, kFinished };
  // What to do once the current group has exited.
  enum class AfterStop { kNothing, kReportStopped, kFinish };

  void OnWorkerExit(const WorkerGroup::Worker& w);
  void OnGroupExited();
  // `survivors_may_save`: a failure stops the round; with --survivor grace (msrun + MindIO
  // TTP) the surviving ranks first get that long to save and exit by themselves.
  void StopGroup(int sig, AfterStop after, bool survivors_may_save = false);
  void EndSurvivorGrace();
  size_t LiveRanks() const;
  void WaitForSignal();
  void OnSignal(int sig);
  void Finish(int exit_code);
  void ReportOutcome(const JobResult& result);
  const char* StateName() const;
  bool IsWorkerProcess(pid_t pid) const;
  // agent_fault.cc: the fault-time save and hang detection.
  void StartControlChannel();
  EnvMap ControlEnv() const;
  void OnLocalFailure(const WorkerFailure& failure);
  bool LocalRanksCanSave() const;
  void OnRankSaved(int local_rank, uint64_t id, bool finalize, bool ok, const std::string& error);
  void ArmMonitor();
  void CheckHangs();
  void DeclareHung(int local_rank, const std::string& ranks, uint64_t round);
  void Emit(JsonMessage record);
  // agent_check.cc: the pre-flight checks.
  void StartPreflight();
  void OnSwitchboxDone(const SwitchboxReport& report);
  void ExitExcluded(const std::string& reason);

  boost::asio::io_context& io_;
  AgentOptions opts_;
  const LaunchConfig& config_;
  std::unique_ptr<Coordinator> coordinator_;
  boost::asio::signal_set signals_;
  std::unique_ptr<FileTimerServer> watchdog_;
  std::unique_ptr<ControlServer> control_;
  boost::asio::steady_timer monitor_timer_;  // --monitor-interval: hang checks
  boost::asio::steady_timer fault_timer_;    // stop anyway if no order follows a failure

  // State below is touched only on the loop.
  State state_ = State::kWaiting;
  AfterStop after_stop_ = AfterStop::kNothing;
  std::unique_ptr<WorkerGroup> group_;
  std::unique_ptr<WorkerGroup> retired_group_;
  std::set<int> hung_;  // local ranks declared hung in this attempt
  AgentMetrics metrics_;
  std::unique_ptr<MetricsServer> metrics_server_;
  std::unique_ptr<CheckRunner> check_runner_;     // --network-check: this node's probes
  std::unique_ptr<SwitchboxCheck> switchbox_;     // --switchbox-check, before joining
  bool awaiting_stop_order_ = false;  // a local failure keeps the survivors for the save
  bool in_survivor_grace_ = false;    // stopping, but the survivors may still finish a save
  int grace_signal_ = SIGTERM;        // sent when the grace ends
  std::optional<JobResult> result_;
  int stop_signal_ = 0;      // the forwarded signal that is stopping the job, if any
  bool ever_started_ = false;
  int exit_code_ = 1;
};

}  // namespace ftrun::launcher
