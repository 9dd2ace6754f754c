// HangDetector: --hang-timeout. Every --monitor-interval it looks at the progress the ranks
// report on the control channel; ranks silent for longer than the timeout are told to dump
// their stacks (WorkerChannels::StackDumpSignal) and, a second later, the longest silent one is
// handed to the agent as a failure (exit code 124, like timeout(1)), which starts the
// ordinary fault path. A rank is declared hung once per attempt.
//
// Thread: loop only. Ownership: borrows the clock, the config and the channels (they outlive
// it); the group passed to Watch() must stay alive until Stop() or the next Watch().
#pragma once

#include <functional>
#include <future>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "launcher/agent/worker_channels.h"
#include "launcher/config/launch_config.h"
#include "launcher/workers/failure_report.h"
#include "launcher/workers/worker_group.h"

namespace ftrun::launcher {

class HangDetector {
 public:
  using OnHang = std::function<void(const WorkerFailure&)>;
  // Without a control channel (channels.control() null) nothing is ever watched.
  HangDetector(Clock& clock, const LaunchConfig& config, const WorkerChannels& channels,
               std::shared_future<std::string> host, OnHang on_hang);

  // Watches `group`'s ranks from now on (a new attempt: nobody is hung yet).
  void Watch(const WorkerGroup* group);
  // Stops watching (the group is stopping or gone); pending verdicts are dropped.
  void Stop();

 private:
  void Arm();
  void Check();
  void Declare(int local_rank, const std::string& ranks);

  Clock& clock_;
  const LaunchConfig& config_;
  const WorkerChannels& channels_;
  std::shared_future<std::string> host_;  // resolved by the time a rank hangs
  OnHang on_hang_;
  const WorkerGroup* group_ = nullptr;
  std::unique_ptr<Timer> monitor_;
  std::vector<std::unique_ptr<Timer>> verdicts_;  // stacks being written, then the failure
  std::set<int> hung_;                            // local ranks declared in this attempt
};

}  // namespace ftrun::launcher
