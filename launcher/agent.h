// Agent: the per-node lifecycle. Joins the job through a Coordinator, starts this node's
// workers for each round, watches them (a child's exit is an event, seen at once), stops
// them on failure, restart or signal, and ends with torchrun's exit code:
//   0 every worker succeeded; 1 the job failed or a forwarded signal stopped it.
//
//   waiting --round--> running --failure/restart--> stopping --stopped--> waiting ...
//                         |                            |
//                         +--success/finished--------> finished (exit code known)
//
// Thread: loop only (the io_context passed in). Run() drives the loop until the job is over.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <future>
#include <memory>
#include <optional>
#include <string>

#include "launcher/coordinator.h"
#include "launcher/environment.h"
#include "launcher/file_timer_server.h"
#include "launcher/launch_config.h"
#include "launcher/log_dir.h"
#include "launcher/worker_group.h"

namespace ftrun::launcher {

struct AgentOptions {
  const LaunchConfig* config = nullptr;
  EnvMap agent_env;  // ftrun's environment, OMP_NUM_THREADS rule applied
  std::shared_future<std::string> host;  // this host's name, for failure reports
  RunLogDir log_dir;
  std::string watchdog_fifo;  // serve torch's FileTimerClient requests here ("" = off)
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

 private:
  enum class State { kWaiting, kRunning, kStopping, kFinished };
  // What to do once the current group has exited.
  enum class AfterStop { kNothing, kReportStopped, kFinish };

  void OnWorkerExit(const WorkerGroup::Worker& w);
  void OnGroupExited();
  void StopGroup(int sig, AfterStop after);
  void WaitForSignal();
  void OnSignal(int sig);
  void Finish(int exit_code);
  void ReportOutcome(const JobResult& result);
  const char* StateName() const;
  bool IsWorkerProcess(pid_t pid) const;

  boost::asio::io_context& io_;
  AgentOptions opts_;
  const LaunchConfig& config_;
  std::unique_ptr<Coordinator> coordinator_;
  boost::asio::signal_set signals_;
  std::unique_ptr<FileTimerServer> watchdog_;

  // State below is touched only on the loop.
  State state_ = State::kWaiting;
  AfterStop after_stop_ = AfterStop::kNothing;
  std::unique_ptr<WorkerGroup> group_;
  std::unique_ptr<WorkerGroup> retired_group_;
  std::vector<WorkerFailure> local_failures_;
  std::optional<JobResult> result_;
  int stop_signal_ = 0;      // the forwarded signal that is stopping the job, if any
  bool ever_started_ = false;
  int exit_code_ = 1;
};

}  // namespace ftrun::launcher
