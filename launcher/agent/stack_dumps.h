// StackDumps: the agent's part of merged stacks (launcher/diagnostics/). It answers the
// job's stack-dump orders with this node's ranks' stacks, and, when a rank hangs, gathers
// the stacks of every rank — job-wide through the coordinator's rendezvous server when there
// is one (every agent answers the order), else this node's — merges them, writes the report
// (<stacks dir>/hang-<round>-<time>.txt and .svg) and hands back the one-line summary that
// names the ranks stuck where the others are not, and those ranks.
//
// Thread: loop only; nothing blocks (collections wait on timers, bounded by deadlines).
// Ownership: borrows io, clock, config, channels and coordinator (they outlive it); reads
// the running group through `current`. Errors: a report that cannot be written is a warning;
// the summary is handed back anyway.
#pragma once

#include <boost/asio/io_context.hpp>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "launcher/agent/worker_channels.h"
#include "launcher/config/launch_config.h"
#include "launcher/coordinator/coordinator.h"
#include "launcher/diagnostics/stack_collector.h"
#include "launcher/workers/worker_group.h"

namespace ftrun::launcher {

// What the merged stacks of a hang say.
struct HangStacks {
  std::string summary;         // one line: "rank(s) 3 stuck where the others are not (...)"
  std::vector<int> differing;  // the ranks stuck where the others are not (empty: none)
};

class StackDumps {
 public:
  StackDumps(boost::asio::io_context& io, Clock& clock, const WorkerChannels& channels,
             Coordinator& coordinator, std::string stacks_dir, std::shared_future<std::string> host,
             CurrentGroup current);

  // Listener::OnStacksOrder: this node's ranks answer order `stacks_id`.
  void OnOrder(uint64_t stacks_id);
  // A hang in `round`: `done(stacks)` once the report is written (or could not be).
  void ForHang(uint64_t round, std::function<void(const HangStacks&)> done);

  // How long a collection may take on one node, and a job-wide one in all.
  static constexpr std::chrono::milliseconds kLocalDeadline{2500};
  static constexpr std::chrono::milliseconds kJobDeadline{4000};

 private:
  StackCollector* Collector();  // null without a control channel (no dump directory)
  std::vector<StackTarget> Targets() const;
  void Collect(std::function<void(std::vector<RankDump>)> done);
  void Write(uint64_t round, std::vector<RankDump> dumps, const std::string& note,
             std::function<void(const HangStacks&)> done);

  boost::asio::io_context& io_;
  Clock& clock_;
  const WorkerChannels& channels_;
  Coordinator& coordinator_;
  std::string stacks_dir_;
  std::shared_future<std::string> host_;
  CurrentGroup current_;
  std::unique_ptr<StackCollector> collector_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace ftrun::launcher
