#include "launcher/agent/hang_detector.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/clock.h"
#include "common/log.h"
#include "launcher/diagnostics/stacks.h"

namespace ftrun::launcher {

HangDetector::HangDetector(Clock& clock, const LaunchConfig& config, const WorkerChannels& channels,
                           std::shared_future<std::string> host, DumpStacks dump, OnHang on_hang)
    : clock_(clock),
      config_(config),
      channels_(channels),
      host_(std::move(host)),
      dump_(std::move(dump)),
      on_hang_(std::move(on_hang)),
      monitor_(clock.NewTimer()),
      fallback_(clock.NewTimer()) {}

HangChoice ChooseHungRank(const std::vector<int>& silent, const std::vector<int>& globals,
                          const std::vector<int>& differing) {
  const std::set<int> stuck(differing.begin(), differing.end());
  for (int lr : silent) {
    if (stuck.count(globals.at(lr))) return {lr, false};
  }
  const bool stuck_here =
      std::any_of(globals.begin(), globals.end(), [&](int g) { return stuck.count(g) > 0; });
  if (!stuck.empty() && !stuck_here) return {-1, true};
  return {silent.front(), false};
}

void HangDetector::Watch(const WorkerGroup* group) {
  Stop();
  group_ = group;
  Arm();
}

void HangDetector::Stop() {
  group_ = nullptr;
  hung_.clear();
  monitor_->Cancel();
  fallback_->Cancel();
  ++epoch_;
}

void HangDetector::Arm() {
  if (config_.hang_timeout.count() <= 0 || !channels_.control() || !group_) return;
  monitor_->Start(ClockDuration(config_.monitor_interval), [this] {
    Check();
    Arm();
  });
}

void HangDetector::Check() {
  const ControlServer& channel = *channels_.control();
  const auto now = clock_.Now();
  std::vector<int> silent;  // local ranks, the longest silent first
  for (const auto& w : group_->workers()) {
    if (w.local_rank < 0) continue;
    const RankControl& rc = channel.rank(w.local_rank);
    // A rank whose loop is over, or that closed its channel (it is exiting, its stack-dump
    // handler may be gone), is not watched: the signal would kill it.
    if (!rc.progress_seen || rc.finished || !rc.connected || hung_.count(w.local_rank) ||
        !w.process || w.process->exited()) {
      continue;
    }
    if (now - rc.last_progress >= config_.hang_timeout) silent.push_back(w.local_rank);
  }
  if (silent.empty()) return;
  std::sort(silent.begin(), silent.end(), [&](int a, int b) {
    return channel.rank(a).last_progress < channel.rank(b).last_progress;
  });
  std::vector<int> silent_ranks;
  for (int lr : silent) {
    hung_.insert(lr);
    silent_ranks.push_back(group_->workers().at(lr).rank);
  }
  const std::string ranks = FoldRanks(silent_ranks);
  // A rank stuck in a collective makes its peers wait too: every rank's stacks are merged
  // to tell the one stuck elsewhere, and one failure (the longest silent) starts the fault
  // protocol once they are in.
  LauncherLog()->warn(
      "rank(s) {} reported no progress for {:g}s after step {}; merging every rank's stacks "
      "and treating it as a failure",
      ranks, config_.hang_timeout.count(), channel.rank(silent.front()).step);
  dump_(group_->assignment().round,
        [this, epoch = epoch_, silent, ranks](const HangStacks& stacks) {
          if (epoch == epoch_ && group_) Decide(silent, ranks, stacks);
        });
}

void HangDetector::Decide(const std::vector<int>& silent, const std::string& ranks,
                          const HangStacks& stacks) {
  std::vector<int> globals;  // the ranks come first in workers(), in local rank order
  for (const auto& w : group_->workers()) {
    if (w.local_rank >= 0) globals.push_back(w.rank);
  }
  const HangChoice choice = ChooseHungRank(silent, globals, stacks.differing);
  if (!choice.elsewhere) return Declare(choice.local_rank, ranks, stacks.summary);
  LauncherLog()->info(
      "rank(s) {} silent here wait where the others are; the stuck rank(s) {} run on another "
      "node, whose agent declares the hang (here after another {:g}s if no fault comes)",
      ranks, FoldRanks(stacks.differing), config_.hang_timeout.count());
  fallback_->Start(ClockDuration(config_.hang_timeout),
                   [this, epoch = epoch_, lr = silent.front(), ranks, stacks] {
                     if (epoch != epoch_ || !group_) return;
                     const auto& w = group_->workers().at(lr);
                     if (w.process && !w.process->exited()) Declare(lr, ranks, stacks.summary);
                   });
}

void HangDetector::Declare(int local_rank, const std::string& ranks, const std::string& summary) {
  const auto& w = group_->workers().at(local_rank);
  const ControlServer& channel = *channels_.control();
  WorkerFailure f;
  f.local_rank = local_rank;
  f.rank = w.rank;
  f.pid = w.process->pid();
  f.exitcode = 124;  // timeout(1)'s code: the process did not exit, it stopped progressing
  f.error_file = "<N/A>";
  f.message =
      fmt::format("hang: no progress for {:g}s after step {} (silent here: {}); {}",
                  config_.hang_timeout.count(), channel.rank(local_rank).step, ranks, summary);
  f.timestamp = WallSeconds();
  f.host = host_.get();
  on_hang_(f);
}

}  // namespace ftrun::launcher
