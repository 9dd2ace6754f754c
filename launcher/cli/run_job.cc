#include "launcher/cli/run_job.h"

#include <csignal>
#include <filesystem>

#include "common/endpoint.h"
#include "common/event_log.h"
#include "common/log.h"
#include "launcher/agent/agent.h"
#include "launcher/agent/agent_store.h"
#include "launcher/coordinator/job_setup.h"
#include "launcher/report/report_writer.h"

namespace ftrun::launcher {

void PrintDryRunSummary(const LaunchConfig& c, const std::string& nproc_note, std::ostream& out) {
  const bool is_static = c.backend == RendezvousBackend::kStatic;
  const std::string endpoint = Endpoint{c.endpoint_host, c.endpoint_port}.ToString();
  out << "ftrun --dry-run: the command line is valid\n"
      << "  nodes:          " << c.min_nodes << ":" << c.max_nodes << "\n"
      << "  workers/node:   "
      << (nproc_note.empty() ? std::to_string(c.nproc_per_node) + " (" + c.nproc_spec + ")"
                             : c.nproc_spec + " (not resolved on this machine: " + nproc_note + ")")
      << "\n"
      << "  rendezvous:     "
      << (c.max_nodes == 1 ? std::string("single node (in-process)")
          : is_static      ? "static, node rank " + std::to_string(c.node_rank) + " at " + endpoint
                           : "c10d (ftrun) at " + endpoint)
      << ", run id " << c.run_id << "\n"
      << "  max restarts:   " << c.max_restarts << " (job-wide)\n"
      << "  fault save:     " << (c.fault_save ? "on" : "off")
      << fmt::format(", save timeout {:g}s, hang timeout ", c.save_timeout.count())
      << (c.hang_timeout.count() > 0 ? fmt::format("{:g}s", c.hang_timeout.count()) : "off")
      << "\n";
  if (c.flash_persist_at_breakpoint) {
    out << "  at breakpoints: the newest memory snapshots are written to storage\n";
  }
  if (c.survivor_grace.count() > 0) {
    out << fmt::format("  survivor grace: {:g}s (MindIO TTP saves before the stop)\n",
                       c.survivor_grace.count());
  }
  const PreflightConfig& p = c.preflight;
  out << "  network check:  ";
  if (!p.network_check) {
    out << "off\n";
  } else {
    out << fmt::format("on, {} bytes each way per pair, timeout {:g}s", p.bytes, p.timeout.count());
    if (p.min_bandwidth_mbps > 0) out << fmt::format(", min {:g} MB/s", p.min_bandwidth_mbps);
    out << fmt::format(", stragglers below {:g} x median {}", p.straggler_fraction,
                       p.exclude_stragglers ? "excluded" : "reported");
    if (!p.command.empty()) out << ", command: " << p.command.back();
    out << (c.max_nodes == 1 ? " (single node: nothing to test)" : "") << "\n";
  }
  out << "  switchbox:      ";
  if (!p.switchbox) {
    out << "off\n";
  } else {
    std::string pairs;
    for (const auto& bp : p.box_pairs) pairs += (pairs.empty() ? "" : " ") + bp.Name();
    out << fmt::format("pairs {}, at least {} at {:g} MB/s, within {:g}s\n", pairs,
                       p.switchbox_min_channels, p.switchbox_min_bandwidth_mbps,
                       p.switchbox_timeout.count());
  }
  out << "  event log:      "
      << (!c.event_log.empty()       ? c.event_log
          : c.log_dir == "/dev/null" ? std::string("off")
                                     : std::string("events.jsonl in the run's log directory"))
      << "\n"
      << "  metrics:        "
      << (c.metrics_port ? (*c.metrics_port == 0 ? std::string("any free port")
                                                 : "port " + std::to_string(*c.metrics_port))
                         : std::string("off"))
      << "\n";
}

int RunJob(const LaunchConfig& config, EnvMap env, std::shared_future<std::string> host,
           JobHooks hooks) {
  auto log = LauncherLog();
  // Sockets and console pipes report EPIPE instead of killing the agent; workers get the
  // default disposition back.
  std::signal(SIGPIPE, SIG_IGN);

  const std::string node_id = MakeNodeId(host.get());
  std::shared_ptr<EventLog> events;
  std::string event_log = config.event_log;
  if (!event_log.empty()) {
    auto opened = EventLog::Open(event_log, config.run_id, node_id);
    if (!opened) {
      log->error("{}", opened.error().message);
      return 1;
    }
    events = *opened;
  } else if (!hooks.run_dir.empty()) {
    // Nobody asked for it: a file that cannot be written costs the job nothing but its report.
    event_log = (std::filesystem::path(hooks.run_dir) / "events.jsonl").string();
    if (auto opened = EventLog::Open(event_log, config.run_id, node_id)) {
      events = *opened;
    } else {
      log->warn("{}", opened.error().message);
      event_log.clear();
    }
  }
  boost::asio::io_context io;
  auto store_settings = AgentStoreSettingsFrom(env);
  if (!store_settings) {
    log->error("{}", store_settings.error().message);
    return 2;
  }
  std::unique_ptr<store::StoreServer> store;
  if (hooks.agent_store && store_settings->enabled) {
    auto started = StartAgentStore(io, config, host.get(), *store_settings);
    if (!started) {
      log->error("{}", started.error().message);
      return 1;
    }
    store = std::move(*started);
  }
  auto replicas = MakeReplicaService(io, config, env, host.get());
  if (!replicas) {
    log->error("{}", replicas.error().message);
    return 1;
  }
  auto coordinator = MakeCoordinator(io, config, env, host.get(), node_id, events,
                                     store ? store->port() : 0, replicas->get());
  if (!coordinator) {
    log->error("{}", coordinator.error().message);
    return 1;
  }
  auto planner = hooks.make_planner((*coordinator)->HostsRendezvous());
  if (!planner) {
    log->error("{}", planner.error().message);
    return 1;
  }
  AgentOptions opts;
  opts.config = &config;
  opts.planner = std::move(*planner);
  opts.agent_env = std::move(env);
  opts.host = host;
  opts.watchdog_fifo = hooks.watchdog_fifo;
  opts.stacks_dir = hooks.stacks_dir;
  opts.events = events;
  if (!hooks.run_dir.empty() && !event_log.empty()) {
    std::error_code ec;
    opts.report_path =
        std::filesystem::absolute(std::filesystem::path(hooks.run_dir) / "report.html", ec)
            .string();
  }
  opts.signal_exit_code = hooks.signal_exit_code;
  opts.store = std::move(store);
  opts.replicas = std::move(*replicas);
  std::function<void()> ready_with_workers = config.max_nodes == 1 ? hooks.on_ready : nullptr;
  if (config.max_nodes != 1 && hooks.on_ready) hooks.on_ready();
  opts.on_workers_started = [ready = std::move(ready_with_workers),
                             started = std::move(hooks.on_workers_started)] {
    if (ready) ready();
    if (started) started();
  };
  Agent agent(io, std::move(opts), std::move(*coordinator));
  const int code = agent.Run();
  if (agent.had_faults() && !hooks.run_dir.empty() && !event_log.empty()) {
    // The loop is over: the page's file I/O (bounded, report_inputs.h) delays nobody. Its path
    // was logged before the failure summary.
    auto page = report::WriteReport(hooks.run_dir, "", event_log);
    if (page) {
      log->debug("post-mortem page written path={}", *page);
    } else {
      log->warn("post-mortem page: {}", page.error().message);
    }
  }
  return code;
}

}  // namespace ftrun::launcher
