#include <sys/resource.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <csignal>
#include <iostream>

#include "common/environment.h"
#include "common/event_log.h"
#include "common/log.h"
#include "common/metrics_server.h"
#include "launcher/cli/master_args.h"
#include "launcher/config/host.h"
#include "launcher/config/launch_config.h"
#include "launcher/coordinator/job_setup.h"
#include "rendezvous/credentials.h"
#include "rendezvous/rendezvous_conf.h"
#include "rendezvous/rendezvous_server.h"

namespace ftrun::launcher {
namespace {

constexpr const char* kProgram = "ftrun master";

}  // namespace

int RunMaster(const std::vector<std::string>& argv) {
  ParsedMaster cmd = ParseMasterArgs(argv);
  if (auto code = ExitCodeIfNotRun(cmd, kProgram)) return *code;
  const MasterArgs& a = cmd.args;
  EnvMap env = CurrentEnvironment();
  auto nodes = ParseNnodes(a.nnodes);
  if (!nodes) return UsageError(kProgram, nodes.error().message);
  auto conf = rendezvous::ParseRendezvousConf(a.rdzv_conf);
  if (!conf) return UsageError(kProgram, conf.error().message);
  if (a.port < 0 || a.port > 65535)
    return UsageError(kProgram, "--port: not a port number (0-65535)");
  if (a.max_restarts < 0) return UsageError(kProgram, "--max-restarts: must be >= 0");
  if (a.nproc_per_node < 0) return UsageError(kProgram, "--nproc-per-node: must be >= 0");
  if (a.rdzv_id.empty()) return UsageError(kProgram, "--rdzv-id: must not be empty");
  auto level =
      ParseLogLevel(a.log_level.empty() ? Lookup(env, "LOGLEVEL").value_or("info") : a.log_level);
  if (!level) return UsageError(kProgram, level.error().message);
  InitLogging(*level);
  auto log = RendezvousLog();
  for (const auto& w : conf->warnings) log->warn("{}", w);

  rendezvous::ServerOptions so;
  so.listen_host = a.host;
  so.port = a.port;
  auto security = rendezvous::ResolveSecurity(*conf, env);
  if (!security) return UsageError(kProgram, security.error().message);
  so.token = security->token;
  so.tls = security->tls;
  so.max_watches_per_peer = static_cast<size_t>(conf->max_watches_per_peer);
  // The job as agents with these options would describe it, so that JobSpecFrom derives the
  // rendezvous' settings as an agent hosting the server does.
  LaunchConfig job;
  job.backend = RendezvousBackend::kDynamic;
  job.backend_name = "c10d";
  job.run_id = a.rdzv_id;
  std::tie(job.min_nodes, job.max_nodes) = *nodes;
  job.nproc_per_node = a.nproc_per_node;
  job.max_restarts = a.max_restarts;
  if (a.node_unit < 1) return UsageError(kProgram, "--node-unit: must be at least 1");
  if (job.max_nodes % a.node_unit != 0) {
    return UsageError(kProgram, "--node-unit " + std::to_string(a.node_unit) + ": --nnodes MAX " +
                                    std::to_string(job.max_nodes) + " is not a multiple of it");
  }
  job.node_unit = a.node_unit;
  {
    TorchrunArgs t;  // the agents' options, validated alike
    t.network_check = a.network_check;
    t.network_check_bytes = a.network_check_bytes;
    t.network_check_timeout = a.network_check_timeout;
    if (a.min_network_bandwidth > 0) t.min_network_bandwidth = a.min_network_bandwidth;
    t.straggler_fraction = a.straggler_fraction;
    t.exclude_straggler = a.exclude_straggler;
    if (auto s = BuildPreflightConfig(t, env, "python3", job.preflight); !s) {
      return UsageError(kProgram, s.error().message);
    }
    if (a.comm_perf_test) job.preflight.command = {"(the agents')"};
  }
  job.rdzv = *conf;
  if (a.fault_save != "on" && a.fault_save != "off") {
    return UsageError(kProgram, "--fault-save: '" + a.fault_save + "' is not on or off");
  }
  job.fault_save = a.fault_save == "on";
  if (a.save_timeout < 0) return UsageError(kProgram, "--save-timeout: must be >= 0 seconds");
  if (a.save_timeout > 0) {
    job.save_timeout = std::chrono::duration<double>(a.save_timeout);
  } else {
    auto ttp = TtpSaveTimeout(env);
    if (!ttp) return UsageError(kProgram, ttp.error().message);
    if (*ttp) job.save_timeout = **ttp;
  }
  if (!(a.restart_backoff >= 0)) return UsageError(kProgram, "--restart-backoff: must be >= 0");
  if (a.exclude_after < 0) return UsageError(kProgram, "--exclude-after: must be >= 0");
  job.restart_backoff = std::chrono::duration<double>(a.restart_backoff);
  job.exclude_after = a.exclude_after;
  so.job = JobSpecFrom(job);

  std::string event_log =
      a.event_log.empty() ? Lookup(env, "FTRUN_EVENT_LOG").value_or("") : a.event_log;
  if (!event_log.empty()) {
    auto opened =
        EventLog::Open(event_log, a.rdzv_id,
                       "master:" + FullyQualifiedHostname() + ":" + std::to_string(::getpid()));
    if (!opened) {
      log->error("{}", opened.error().message);
      return 1;
    }
    so.event_log = *opened;
  }
  if (a.metrics_port < -1 || a.metrics_port > 65535) {
    return UsageError(kProgram, "--metrics-port: not a port number (0-65535, or -1 for none)");
  }
  std::signal(SIGPIPE, SIG_IGN);
  // One connection per agent: thousands of agents need thousands of descriptors.
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
  }
  boost::asio::io_context io;
  rendezvous::RendezvousServer server(io, so);
  auto port = server.Start();
  if (!port) {
    log->error("{}", port.error().message);
    return 1;
  }
  std::unique_ptr<MetricsServer> metrics;
  if (a.metrics_port >= 0) {
    metrics = std::make_unique<MetricsServer>(io, [&] { return server.RenderMetrics(); });
    auto mport = metrics->Start(a.metrics_port);
    if (!mport) {
      log->error("{}", mport.error().message);
      return 1;
    }
    log->info("metrics at http://{}:{}/metrics", FullyQualifiedHostname(), *mport);
  }
  int exit_code = 1;
  boost::asio::signal_set signals(io, SIGTERM, SIGINT, SIGHUP);
  server.OnJobFinished([&](const rendezvous::NodeView& v) {
    exit_code = v.phase == rendezvous::Phase::kSucceeded ? 0 : 1;
    server.FinishAndShutdown("", std::chrono::seconds(10), [&] {
      signals.cancel();
      if (metrics) metrics->Stop();
    });
  });
  signals.async_wait([&](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    log->warn("received signal {}; failing the job and stopping", sig);
    server.FinishAndShutdown("ftrun master stopped by signal " + std::to_string(sig),
                             std::chrono::seconds(2), [&] {
                               if (metrics) metrics->Stop();
                             });
  });
  io.run();
  return exit_code;
}

}  // namespace ftrun::launcher
