// HangDetector: --hang-timeout. Every --monitor-interval it looks at the progress the ranks
// report on the control channel; when ranks are silent for longer than the timeout, every
// rank's stacks are gathered and merged (`dump`: StackDumps::ForHang, bounded by its
// deadlines) and then the longest silent one is handed to the agent as a failure (exit code
// 124, like timeout(1)), which starts the ordinary fault path; its message names the ranks
// stuck where the others are not. A rank is declared hung once per attempt.
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
  // Gathers the stacks of a hang in `round`; calls back with the merged summary.
  using DumpStacks =
      std::function<void(uint64_t round, std::function<void(const std::string& summary)>)>;
  // Without a control channel (channels.control() null) nothing is ever watched.
  HangDetector(Clock& clock, const LaunchConfig& config, const WorkerChannels& channels,
               std::shared_future<std::string> host, DumpStacks dump, OnHang on_hang);

  // Watches `group`'s ranks from now on (a new attempt: nobody is hung yet).
  void Watch(const WorkerGroup* group);
  // Stops watching (the group is stopping or gone); pending verdicts are dropped.
  void Stop();

 private:
  void Arm();
  void Check();
  void Declare(int local_rank, const std::string& ranks, const std::string& summary);

  Clock& clock_;
  const LaunchConfig& config_;
  const WorkerChannels& channels_;
  std::shared_future<std::string> host_;  // resolved by the time a rank hangs
  DumpStacks dump_;
  OnHang on_hang_;
  const WorkerGroup* group_ = nullptr;
  std::unique_ptr<Timer> monitor_;
  uint64_t epoch_ = 0;  // a verdict from before the last Stop() or Watch() is dropped
  std::set<int> hung_;  // local ranks declared in this attempt
};

}  // namespace ftrun::launcher
