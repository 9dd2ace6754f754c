// SaveRelay: the fault-time save as seen from this node. It relays the rendezvous' save
// orders to the chosen local ranks over the control channel (WorkerChannels) and their
// answers back:
//
//   SaveOrder collecting  -> report every local rank's progress (step, group, health)
//   SaveOrder with savers -> "save" to this node's savers; a rank's answer -> ReportSaved
//   SaveOrder finalize    -> "finalize" to the finalizer if it is ours
//
// A rank that is not connected, or that exits before it answers, is reported as a failed
// save at once, so the round never waits on it. Thread: loop only. Ownership: borrows the channels,
// the coordinator, the events, the metrics and the clock (they outlive it); reads the running group
// through `group`.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "common/clock.h"
#include "launcher/agent/agent_events.h"
#include "launcher/agent/agent_metrics.h"
#include "launcher/agent/worker_channels.h"
#include "launcher/config/launch_config.h"
#include "launcher/coordinator/coordinator.h"
#include "launcher/workers/worker_group.h"

namespace ftrun::launcher {

class SaveRelay {
 public:
  SaveRelay(const LaunchConfig& config, WorkerChannels& channels, Coordinator& coordinator,
            AgentEvents& events, AgentMetrics& metrics, Clock& clock, CurrentGroup group);

  // Whether a live local rank could save now (so a failure keeps the survivors).
  bool LocalRanksCanSave() const;
  void OnSaveOrder(uint64_t round, const rendezvous::SaveOrder& order);
  // A rank's answer on the control channel (ControlServer::Events::on_saved).
  void OnRankSaved(int local_rank, uint64_t id, bool finalize, bool ok, const std::string& error);
  // The process of `local_rank` has exited (after its last words were read): an order it had
  // not answered fails now instead of at the save timeout.
  void OnRankExited(int local_rank);

 private:
  void ReportProgress(uint64_t round, const rendezvous::SaveOrder& order);
  // Sends `m` to `rank`, or reports the save failed if the rank cannot be reached.
  void SendOrFail(int rank, int base, const JsonMessage& m, uint64_t id, bool finalize,
                  const std::string& why);

  const LaunchConfig& config_;
  WorkerChannels& channels_;
  Coordinator& coordinator_;
  AgentEvents& events_;
  AgentMetrics& metrics_;
  Clock& clock_;
  CurrentGroup group_;
  std::map<uint64_t, Clock::TimePoint> ordered_at_;  // save id -> when it was ordered
  struct Unanswered {
    uint64_t id = 0;
    bool finalize = false;
  };
  std::map<int, std::vector<Unanswered>> unanswered_;  // local rank -> orders sent to it
};

}  // namespace ftrun::launcher
