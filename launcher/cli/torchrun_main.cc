#include "launcher/cli/torchrun_main.h"

#include <csignal>
#include <future>
#include <iostream>

#include "launcher/agent.h"
#include "launcher/cli/torchrun_args.h"
#include "launcher/host.h"
#include "launcher/launch_config.h"
#include "launcher/job_setup.h"
#include "launcher/log_dir.h"
#include "launcher/torchrun_plan.h"
#include "rendezvous/endpoint.h"
#include "rendezvous/event_log.h"
#include "launcher/worker_env.h"
#include "rendezvous/log.h"

namespace ftrun::launcher {
namespace {

int UsageError(const std::string& message) {
  std::cerr << "ftrun: error: " << message << std::endl;
  return 2;
}

// --dry-run: what would run, on stdout; nothing is started, bound or created.
int DryRun(const LaunchConfig& c, const EnvMap& env) {
  const bool is_static = c.backend == RendezvousBackend::kStatic;
  std::cout << "ftrun --dry-run: the command line is valid\n"
            << "  nodes:          " << c.min_nodes << ":" << c.max_nodes << "\n"
            << "  workers/node:   " << c.nproc_per_node << " (" << c.nproc_spec << ")\n"
            << "  rendezvous:     "
            << (c.max_nodes == 1 ? "single node (in-process)"
                                 : (is_static ? "static, node rank " + std::to_string(c.node_rank)
                                              : std::string("c10d (ftrun)")) +
                                       " at " +
                                       rendezvous::Endpoint{c.endpoint_host, c.endpoint_port}
                                           .ToString())
            << ", run id " << c.run_id << "\n"
            << "  max restarts:   " << c.max_restarts << " (job-wide)\n"
            << "  fault save:     " << (c.fault_save ? "on" : "off") << ", save timeout "
            << c.save_timeout.count() << "s, hang timeout "
            << (c.hang_timeout.count() > 0 ? std::to_string(c.hang_timeout.count()) + "s" : "off")
            << "\n";
  WorkerCommand cmd = BuildWorkerCommand(c, 0);
  std::string program = FindProgram(cmd.program, env);
  std::cout << "  worker 0 runs:  "
            << (program.empty() ? cmd.program + " (not found in PATH)" : program);
  for (const auto& a : cmd.args) std::cout << " " << a;
  std::cout << std::endl;
  return 0;
}

}  // namespace

int RunTorchrun(const std::vector<std::string>& argv) {
  ParsedCommandLine cmd = ParseTorchrunArgs(argv);
  switch (cmd.action) {
    case ParsedCommandLine::Action::kPrintedHelp:
    case ParsedCommandLine::Action::kPrintedVersion:
      return 0;
    case ParsedCommandLine::Action::kUsageError:
      return UsageError(cmd.error);
    case ParsedCommandLine::Action::kRun:
      break;
  }
  EnvMap env = CurrentEnvironment();
  auto built = BuildLaunchConfig(cmd.args, env);
  if (!built) return UsageError(built.error().message);
  LaunchConfig& config = *built;
  InitLogging(config.log_level);
  auto log = Logger("launcher");
  for (const auto& w : config.warnings) log->warn("{}", w);

  // DNS can be slow; only failure reports and dynamic rendezvous need the name.
  std::shared_future<std::string> host =
      std::async(std::launch::async, FullyQualifiedHostname).share();

  if (auto s = ResolveNprocPerNode(config, DetectHostFacts(env)); !s) {
    log->error("{}", s.error().message);
    return 1;
  }
  if (config.dry_run) return DryRun(config, env);
  if (ApplyOmpNumThreadsRule(env, config.nproc_per_node)) log->warn("{}", kOmpBanner);
  // torchrun's watchdog: with TORCHELASTIC_ENABLE_FILE_TIMER=1 the agent serves a FIFO whose
  // path the workers find in TORCHELASTIC_TIMER_FILE.
  std::string watchdog_fifo;
  if (Lookup(env, "TORCHELASTIC_ENABLE_FILE_TIMER") == "1") {
    watchdog_fifo =
        Lookup(env, "TORCHELASTIC_TIMER_FILE").value_or("/tmp/watchdog_timer_" + RandomUuid4());
    env["TORCHELASTIC_TIMER_FILE"] = watchdog_fifo;
  }

  auto log_dir = RunLogDir::Create(config.log_dir, config.run_id, env);
  if (!log_dir) {
    log->error("{}", log_dir.error().message);
    return 1;
  }
  log->info(
      "starting nnodes={}:{} nproc_per_node={} max_restarts={} run_id={} rdzv_backend={} "
      "entrypoint={} log_dir={}",
      config.min_nodes, config.max_nodes, config.nproc_per_node, config.max_restarts,
      config.run_id, config.backend == RendezvousBackend::kStatic ? "static" : "c10d",
      config.script, log_dir->disabled() ? "/dev/null" : log_dir->run_dir());

  // Sockets and console pipes report EPIPE instead of killing the agent; workers get the
  // default disposition back.
  std::signal(SIGPIPE, SIG_IGN);

  const std::string node_id = MakeNodeId(host.get());
  std::shared_ptr<rendezvous::EventLog> events;
  if (!config.event_log.empty()) {
    auto opened = rendezvous::EventLog::Open(config.event_log, config.run_id, node_id);
    if (!opened) {
      log->error("{}", opened.error().message);
      return 1;
    }
    events = *opened;
  }
  boost::asio::io_context io;
  auto coordinator = MakeCoordinator(io, config, env, host.get(), node_id, events);
  if (!coordinator) {
    log->error("{}", coordinator.error().message);
    return 1;
  }
  AgentOptions opts;
  opts.config = &config;
  opts.planner = std::make_unique<TorchrunPlanner>(config, env, std::move(*log_dir));
  opts.agent_env = std::move(env);
  opts.host = host;
  opts.watchdog_fifo = watchdog_fifo;
  opts.events = events;
  Agent agent(io, std::move(opts), std::move(*coordinator));
  return agent.Run();
}

}  // namespace ftrun::launcher
