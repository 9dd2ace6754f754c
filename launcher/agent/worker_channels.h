// WorkerChannels: the local channels between this node's workers and the agent — the
// control channel (launcher/channels/control_server.h: progress, fault-time saves, stack
// dumps) and torch's file-timer watchdog FIFO (launcher/channels/file_timer_server.h). It
// opens them, tells each new round's workers how to reach them (WorkerEnv) and which pids
// may speak (GroupStarted), and closes them at the end.
//
// Thread: loop only. Ownership: owns both servers; borrows the config (it outlives it) and
// reads the running group through `current`.
// Errors: a control channel that cannot be opened only turns fault-time saves off (a
// warning); a watchdog FIFO that cannot be served is an error (the user asked for it).
#pragma once

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <memory>
#include <string>

#include "common/environment.h"
#include "common/result.h"
#include "launcher/channels/control_server.h"
#include "launcher/channels/file_timer_server.h"
#include "launcher/config/launch_config.h"
#include "launcher/workers/worker_group.h"

namespace ftrun::launcher {

class WorkerChannels {
 public:
  // `events` receive what the ranks say on the control channel (on the loop).
  // run_started: when this run began, given to the workers (FTRUN_RUN_STARTED); SetRunStarted
  // moves it to the job's (an earlier agent's start) for the workers started after.
  WorkerChannels(boost::asio::io_context& io, const LaunchConfig& config,
                 std::chrono::system_clock::time_point run_started, ControlServer::Events events,
                 CurrentGroup current);
  ~WorkerChannels();

  // Opens the control channel under $XDG_RUNTIME_DIR or $TMPDIR (else /tmp) and, when
  // `watchdog_fifo` is not empty, serves torch's FileTimerClient requests on it.
  Status Start(const EnvMap& agent_env, const std::string& watchdog_fifo);
  void Stop();

  // FTRUN_* variables for every worker ({} when there is no control channel).
  EnvMap WorkerEnv() const;
  void SetRunStarted(std::chrono::system_clock::time_point run_started) {
    run_started_ = run_started;
  }
  // A new round's workers: only their pids may connect, only their process groups may arm
  // watchdog timers.
  void GroupStarted(const WorkerGroup& group);

  // The control channel (null without one): progress and save answers of the ranks.
  const ControlServer* control() const { return control_.get(); }
  ControlServer* control() { return control_.get(); }

  // The signal on which the Python helper dumps every thread's stack (faulthandler).
  static int StackDumpSignal();
  // Where the workers write their stack dumps (python_stack_hook.h); "" without a control
  // channel. A private directory next to the control channel's, removed by Stop().
  const std::string& stack_dump_dir() const { return dump_dir_; }

 private:
  void StartControl(const EnvMap& agent_env);
  void StartStackHook(const std::string& root);

  boost::asio::io_context& io_;
  const LaunchConfig& config_;
  std::chrono::system_clock::time_point run_started_;
  ControlServer::Events events_;
  std::unique_ptr<ControlServer> control_;
  std::unique_ptr<FileTimerServer> watchdog_;
  CurrentGroup current_;
  std::string original_pythonpath_;  // the agent's, for the hook to give back
  std::string stacks_root_;          // ftrun-stacks-XXXXXX: python/ (the hook) and dumps/
  std::string dump_dir_;
};

}  // namespace ftrun::launcher
