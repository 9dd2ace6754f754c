#include "launcher/agent/preflight_driver.h"

#include <fmt/format.h>

#include "common/log.h"

namespace ftrun::launcher {

PreflightDriver::PreflightDriver(boost::asio::io_context& io, const LaunchConfig& config,
                                 EnvMap agent_env, Coordinator& coordinator, AgentEvents& events,
                                 Outcomes outcomes)
    : io_(io),
      config_(config),
      agent_env_(std::move(agent_env)),
      coordinator_(coordinator),
      events_(events),
      outcomes_(std::move(outcomes)) {}

PreflightDriver::~PreflightDriver() = default;

void PreflightDriver::Start() {
  const PreflightConfig& p = config_.preflight;
  if (p.network_check && config_.max_nodes > 1) {
    check_runner_ = std::make_unique<CheckRunner>(io_, p.command, agent_env_);
  } else if (p.network_check) {
    LauncherLog()->info("network check: a single-node job has no pair to test; skipped");
  }
  if (!p.switchbox) {
    outcomes_.join();
    return;
  }
  SwitchboxOptions so;
  so.pairs = p.box_pairs;
  so.min_bandwidth_mbps = p.switchbox_min_bandwidth_mbps;
  so.min_channels = p.switchbox_min_channels;
  so.probe_command = p.switchbox_probe;
  so.env = agent_env_;
  so.time_limit = std::chrono::duration_cast<std::chrono::milliseconds>(p.switchbox_timeout);
  LauncherLog()->info("switchbox check: {} GPU pair(s), at least {} at {:g} MB/s", so.pairs.size(),
                      so.min_channels, so.min_bandwidth_mbps);
  auto check =
      SwitchboxCheck::Start(io_, so, [this](SwitchboxReport report) { OnSwitchboxDone(report); });
  if (!check) {
    LauncherLog()->error("--switchbox-probe: {}", check.error().message);
    outcomes_.fail(check.error().message);
    return;
  }
  switchbox_ = std::move(*check);
}

void PreflightDriver::OnSwitchboxDone(const SwitchboxReport& report) {
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
  events_.Emit(std::move(record));
  if (!report.node_ok) {
    outcomes_.exclude("the switchbox check failed: " + report.Summary());
    return;
  }
  LauncherLog()->info("switchbox check passed: {}", report.Summary());
  outcomes_.join();
}

void PreflightDriver::OnCheckOrder(uint64_t round, const rendezvous::CheckOrder& order) {
  if (!check_runner_) return;
  std::string peers;
  for (const auto& t : order.tasks) {
    peers += fmt::format("{}{} {}", peers.empty() ? "" : ", ", t.client ? "probing" : "answering",
                         t.peer_host);
  }
  LauncherLog()->info("network check round={} check_round={} wave={}: {}", round, order.round,
                      order.wave, peers.empty() ? "waiting for the other pairs" : peers);
  check_runner_->Run(order, [this](uint64_t id, std::vector<rendezvous::CheckTaskResult> r) {
    coordinator_.ReportCheck(id, r);
  });
}

void PreflightDriver::OnCheckFinished(uint64_t check_id, const std::vector<std::string>& table,
                                      const std::string& json) {
  if (check_runner_) check_runner_->Cancel();
  // The rendezvous server hosted here logs and records the check itself (the same log and
  // event log).
  if (coordinator_.HostsRendezvous()) return;
  LauncherLog()->info("network check {} results:", check_id);
  for (const auto& line : table) LauncherLog()->info("  {}", line);
  if (auto record = JsonMessage::Parse(json)) events_.EmitUntagged(*record);
}

void PreflightDriver::Cancel() {
  if (check_runner_) check_runner_->Cancel();
  switchbox_.reset();
}

}  // namespace ftrun::launcher
