// Agent, continued: the pre-flight checks. The switchbox check runs once, before this node
// joins; the network check runs whenever the rendezvous asks (phase checking), and a node it
// excludes leaves with kExitExcluded.
#include <iostream>

#include "launcher/agent/agent.h"
#include "common/log.h"

namespace ftrun::launcher {
namespace {

}  // namespace

void Agent::StartPreflight() {
  const PreflightConfig& p = config_.preflight;
  if (p.network_check && config_.max_nodes > 1) {
    check_runner_ = std::make_unique<CheckRunner>(io_, p.command, opts_.agent_env);
  } else if (p.network_check) {
    LauncherLog()->info("network check: a single-node job has no pair to test; skipped");
  }
  if (!p.switchbox) {
    coordinator_->Start(this);
    return;
  }
  SwitchboxOptions so;
  so.pairs = p.box_pairs;
  so.min_bandwidth_mbps = p.switchbox_min_bandwidth_mbps;
  so.min_channels = p.switchbox_min_channels;
  so.probe_command = p.switchbox_probe;
  so.env = opts_.agent_env;
  so.time_limit = std::chrono::duration_cast<std::chrono::milliseconds>(p.switchbox_timeout);
  LauncherLog()->info("switchbox check: {} GPU pair(s), at least {} at {:g} MB/s", so.pairs.size(),
              so.min_channels, so.min_bandwidth_mbps);
  auto check = SwitchboxCheck::Start(io_, so, [this](SwitchboxReport report) {
    OnSwitchboxDone(report);
  });
  if (!check) {
    LauncherLog()->error("--switchbox-probe: {}", check.error().message);
    result_ = JobResult{false, {}, check.error().message};
    Finish(1);
    return;
  }
  switchbox_ = std::move(*check);
}

void Agent::OnSwitchboxDone(const SwitchboxReport& report) {
  for (const auto& r : report.pairs) {
    LauncherLog()->info("  switchbox pair {}: {}", r.pair.Name(),
                r.ok ? fmt::format("{:.1f} MB/s{}", r.mbps,
                                   r.Passes(report.min_bandwidth_mbps) ? "" : " (too slow)")
                     : r.reason);
  }
  auto record = EventLog::Event("switchbox_check")
                    .Set("passed", report.passed)
                    .Set("min_channels", report.min_channels)
                    .Set("min_bandwidth_mbps", report.min_bandwidth_mbps)
                    .Set("ok", report.node_ok);
  for (const auto& r : report.pairs) {
    record.Append("pairs", JsonMessage(r.pair.Name(), "pair")
                               .Set("ok", r.ok)
                               .Set("mbps", r.mbps)
                               .Set("reason", r.reason));
  }
  Emit(std::move(record));
  if (!report.node_ok) {
    ExitExcluded("the switchbox check failed: " + report.Summary());
    return;
  }
  LauncherLog()->info("switchbox check passed: {}", report.Summary());
  coordinator_->Start(this);
}

void Agent::OnCheckOrder(uint64_t round, const rendezvous::CheckOrder& order) {
  if (!check_runner_) return;
  std::string peers;
  for (const auto& t : order.tasks) {
    peers += fmt::format("{}{} {}", peers.empty() ? "" : ", ", t.client ? "probing" : "answering",
                         t.peer_host);
  }
  LauncherLog()->info("network check round={} check_round={} wave={}: {}", round, order.round,
              order.wave, peers.empty() ? "waiting for the other pairs" : peers);
  check_runner_->Run(order, [this](uint64_t id, std::vector<rendezvous::CheckTaskResult> r) {
    coordinator_->ReportCheck(id, r);
  });
}

void Agent::OnCheckFinished(uint64_t check_id, const std::vector<std::string>& table,
                            const std::string& json) {
  if (check_runner_) check_runner_->Cancel();
  // The rendezvous server hosted here logs and records the check itself (the same log and
  // event log).
  if (coordinator_->HostsRendezvous()) return;
  LauncherLog()->info("network check {} results:", check_id);
  for (const auto& line : table) LauncherLog()->info("  {}", line);
  if (opts_.events) {
    if (auto record = JsonMessage::Parse(json)) opts_.events->Write(*record);
  }
}

void Agent::OnExcluded(const std::string& reason) {
  ExitExcluded(reason);
}

void Agent::ExitExcluded(const std::string& reason) {
  if (state_ == State::kFinished) return;
  LauncherLog()->error("this node leaves the job: {} (exit code {})", reason, kExitExcluded);
  Emit(EventLog::Event("node_excluded").Set("why", reason));
  if (group_ && group_->live_count() > 0) group_->Stop(SIGKILL, std::chrono::milliseconds(0));
  Finish(kExitExcluded);
}

}  // namespace ftrun::launcher
