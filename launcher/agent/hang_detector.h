// HangDetector: --hang-timeout. Every --monitor-interval it looks at the progress the ranks
// report on the control channel; when ranks are silent for longer than the timeout, every
// rank's stacks are gathered and merged (`dump`: StackDumps::ForHang, bounded by its
// deadlines) and then one silent rank is handed to the agent as a failure (exit code 124,
// like timeout(1)), which starts the ordinary fault path; its message names the ranks stuck
// where the others are not. Which one is ChooseHungRank's pure decision: a silent rank the
// merged stacks name as stuck, else the longest silent — unless they name only ranks of
// other nodes: then this node's silent ranks are waiting for those (in a collective) and
// stay healthy, able to serve the fault-time save, while the stuck ranks' agent declares
// the hang; if no fault comes within another --hang-timeout, this node declares after all.
// A rank is declared hung once per attempt.
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
#include "launcher/agent/stack_dumps.h"
#include "launcher/agent/worker_channels.h"
#include "launcher/config/launch_config.h"
#include "launcher/workers/failure_report.h"
#include "launcher/workers/worker_group.h"

namespace ftrun::launcher {

// The hang verdict of one node: the local rank to declare failed, or none because every
// rank the merged stacks name as stuck (`differing`, global ranks) runs on another node.
// `silent`: this node's silent local ranks, longest silent first (not empty); `globals`: the
// global rank of each of this node's local ranks, indexed by local rank.
struct HangChoice {
  int local_rank = -1;     // -1: none here
  bool elsewhere = false;  // the stuck ranks are another node's
};
HangChoice ChooseHungRank(const std::vector<int>& silent, const std::vector<int>& globals,
                          const std::vector<int>& differing);

class HangDetector {
 public:
  using OnHang = std::function<void(const WorkerFailure&)>;
  // Gathers the stacks of a hang in `round`; calls back with the merged summary.
  using DumpStacks = std::function<void(uint64_t round, std::function<void(const HangStacks&)>)>;
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
  void Decide(const std::vector<int>& silent, const std::string& ranks, const HangStacks& stacks);
  void Declare(int local_rank, const std::string& ranks, const std::string& summary);

  Clock& clock_;
  const LaunchConfig& config_;
  const WorkerChannels& channels_;
  std::shared_future<std::string> host_;  // resolved by the time a rank hangs
  DumpStacks dump_;
  OnHang on_hang_;
  const WorkerGroup* group_ = nullptr;
  std::unique_ptr<Timer> monitor_;
  std::unique_ptr<Timer> fallback_;  // a verdict left to another node, declared here if late
  uint64_t epoch_ = 0;               // a verdict from before the last Stop() or Watch() is dropped
  std::set<int> hung_;               // local ranks declared in this attempt
};

}  // namespace ftrun::launcher
