// SaveRelay: the fault-time save as seen from this node. It owns the worker control channel
// (launcher/channels/control_server.h), tells the workers how to reach it, and relays the
// rendezvous' save orders to the chosen local ranks and their answers back:
//
//   SaveOrder collecting  -> report every local rank's progress (step, group, health)
//   SaveOrder with savers -> "save" to this node's savers; a rank's answer -> ReportSaved
//   SaveOrder finalize    -> "finalize" to the finalizer if it is ours
//
// A rank that is not connected is reported as a failed save at once, so the round never
// waits on it. Thread: loop only. Ownership: borrows the coordinator, the report and the
// clock (they outlive it); reads the current worker group through `group`.
#pragma once

#include <boost/asio/io_context.hpp>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "common/clock.h"
#include "common/environment.h"
#include "launcher/agent/agent_report.h"
#include "launcher/channels/control_server.h"
#include "launcher/config/launch_config.h"
#include "launcher/coordinator/coordinator.h"
#include "launcher/workers/worker_group.h"

namespace ftrun::launcher {

class SaveRelay {
 public:
  using CurrentGroup = std::function<const WorkerGroup*()>;
  SaveRelay(boost::asio::io_context& io, const LaunchConfig& config, Coordinator& coordinator,
            AgentReport& report, Clock& clock, CurrentGroup group);
  ~SaveRelay();

  // Opens the channel under $XDG_RUNTIME_DIR or $TMPDIR (else /tmp). Without one, fault-time
  // saves are off (a warning), which is not an error.
  void Start(const EnvMap& agent_env);
  void Stop();

  // FTRUN_* variables for every worker ({} when there is no channel).
  EnvMap WorkerEnv() const;
  // A new round's workers: only their pids may connect.
  void GroupStarted(const WorkerGroup& group);
  // Whether a live local rank could save now (so a failure keeps the survivors).
  bool LocalRanksCanSave() const;
  void OnSaveOrder(uint64_t round, const rendezvous::SaveOrder& order);

  // The channel (null without one): the hang detector reads the ranks' progress from it.
  const ControlServer* channel() const { return control_.get(); }

  // The signal on which the Python helper dumps every thread's stack (faulthandler).
  static int StackDumpSignal();

 private:
  void ReportProgress(uint64_t round, const rendezvous::SaveOrder& order);
  void OnRankSaved(int local_rank, uint64_t id, bool finalize, bool ok, const std::string& error);
  // Sends `m` to `rank`, or reports the save failed if the rank cannot be reached.
  void SendOrFail(int rank, int base, const JsonMessage& m, uint64_t id, bool finalize,
                  const std::string& why);

  boost::asio::io_context& io_;
  const LaunchConfig& config_;
  Coordinator& coordinator_;
  AgentReport& report_;
  Clock& clock_;
  CurrentGroup group_;
  std::unique_ptr<ControlServer> control_;
  std::map<uint64_t, Clock::TimePoint> ordered_at_;  // save id -> when it was ordered
};

}  // namespace ftrun::launcher
