#include "launcher/cli/torchrun_main.h"

#include <csignal>
#include <future>
#include <iostream>

#include "common/endpoint.h"
#include "common/json_message.h"
#include "common/log.h"
#include "launcher/cli/run_job.h"
#include "launcher/cli/torchrun_args.h"
#include "launcher/config/host.h"
#include "launcher/config/launch_config.h"
#include "launcher/personality/dlrover/dlrover_config.h"
#include "launcher/personality/dlrover/numa_affinity.h"
#include "launcher/personality/torchrun/torchrun_plan.h"
#include "launcher/workers/log_dir.h"
#include "launcher/workers/worker_env.h"
#include "launcher/workers/worker_process.h"

namespace ftrun::launcher {
namespace {

// --dry-run: what would run, on stdout; nothing is started, bound or created.
int DryRun(const LaunchConfig& c, const EnvMap& env, const std::string& nproc_note) {
  PrintDryRunSummary(c, nproc_note, std::cout);
  WorkerCommand cmd = BuildWorkerCommand(c, 0);
  std::string program = FindProgram(cmd.program, env);
  std::cout << "  worker 0 runs:  "
            << (program.empty() ? cmd.program + " (not found in PATH)" : program);
  for (const auto& a : cmd.args) std::cout << " " << a;
  std::cout << std::endl;
  // The same for programs (tests/corpus compares it with torch's own parser): every word
  // exactly, and what the rendezvous became.
  std::vector<std::string> argv = {cmd.program};
  argv.insert(argv.end(), cmd.args.begin(), cmd.args.end());
  JsonMessage json("dry_run");
  json.Set("min_nodes", c.min_nodes)
      .Set("max_nodes", c.max_nodes)
      .Set("nproc_per_node", c.nproc_spec)
      .Set("rdzv_backend", c.standalone                              ? "standalone"
                           : c.backend == RendezvousBackend::kStatic ? "static"
                                                                     : "c10d")
      .Set("rdzv_endpoint", Endpoint{c.endpoint_host, c.endpoint_port}.ToString())
      .Set("run_id", c.run_id)
      .Set("max_restarts", c.max_restarts)
      .Set("node_rank", c.node_rank)
      .Set("worker0_argv", argv);
  std::cout << "  as json:        " << json.str() << std::endl;
  return 0;
}

// What every personality built on torchrun's command line runs once its configuration is
// built: logging, the host's facts, the log directory, the agent. `warnings` come from before
// logging was up.
int RunLaunch(LaunchConfig& config, EnvMap env, const std::vector<std::string>& warnings) {
  InitLogging(config.log_level);
  auto log = LauncherLog();
  for (const auto& w : warnings) log->warn("{}", w);
  for (const auto& w : config.warnings) log->warn("{}", w);
  for (const auto& [k, v] : config.extra_env) env[k] = v;

  // DNS can be slow; only failure reports and dynamic rendezvous need the name.
  std::shared_future<std::string> host =
      std::async(std::launch::async, FullyQualifiedHostname).share();

  Status resolved = ResolveNprocPerNode(config, DetectHostFacts(env));
  if (resolved) {
    if (auto s = CheckVirtualLocalRankDevices(config, env); !s) {
      std::cerr << "ftrun: error: " << s.error().message << std::endl;
      return 2;
    }
  }
  // A dry run checks a script on any machine (a login node has no GPU): say it, do not fail.
  if (config.dry_run) return DryRun(config, env, resolved ? "" : resolved.error().message);
  if (!resolved) {
    log->error("{}", resolved.error().message);
    return 1;
  }
  if (config.numa_affinity) PlaceRanksOnNuma(config, env);
  if (config.preflight.switchbox && config.preflight.default_probe) {
    // The bundled probe measures NVIDIA GPUs; without them the check cannot run at all.
    if (auto gpus = CheckSwitchboxGpus(env, config.preflight.box_pairs); !gpus) {
      log->error("--switchbox-check: {}", gpus.error().message);
      return 1;
    }
  }
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
      config.min_nodes, config.max_nodes, config.nproc_per_node, config.max_restarts, config.run_id,
      config.backend_name, config.script, log_dir->disabled() ? "/dev/null" : log_dir->run_dir());

  JobHooks job;
  job.watchdog_fifo = watchdog_fifo;
  if (!log_dir->disabled()) {
    job.run_dir = log_dir->run_dir();
    job.stacks_dir = log_dir->run_dir() + "/stacks";
  }
  job.make_planner = [&config, &env, &log_dir](bool) -> Result<std::unique_ptr<WorkerPlanner>> {
    return std::unique_ptr<WorkerPlanner>(
        std::make_unique<TorchrunPlanner>(config, env, std::move(*log_dir)));
  };
  return RunJob(config, env, host, std::move(job));
}

}  // namespace

int RunTorchrun(const std::vector<std::string>& argv) {
  ParsedCommandLine cmd = ParseTorchrunArgs(argv);
  if (auto code = ExitCodeIfNotRun(cmd, "ftrun")) return *code;
  EnvMap env = CurrentEnvironment();
  auto built = BuildLaunchConfig(cmd.args, env);
  if (!built) return UsageError("ftrun", cmd.Blame(built.error().message));
  return RunLaunch(*built, std::move(env), {});
}

int RunDistributedLaunch(const std::vector<std::string>& argv) {
  const std::string program = "ftrun torch.distributed.launch";
  ParsedDistributedLaunch cmd = ParseDistributedLaunchArgs(argv);
  if (auto code = ExitCodeIfNotRun(cmd, program)) return *code;
  TorchrunArgs& args = cmd.args;
  if (!cmd.args.use_env) {
    if (args.no_python) {
      return UsageError(program,
                        "--no-python needs --use-env (a program run directly is not "
                        "given --local_rank)");
    }
    // Where torch's launch puts it: after the script, before the script's own arguments; the
    // worker's local rank replaces ${local_rank} as in every script argument.
    args.script_args.insert(args.script_args.begin(), "--local_rank=${local_rank}");
  }
  EnvMap env = CurrentEnvironment();
  auto built = BuildLaunchConfig(args, env);
  if (!built) return UsageError(program, cmd.Blame(built.error().message));
  return RunLaunch(*built, std::move(env), {});
}

int RunDlroverRun(const std::vector<std::string>& argv) {
  constexpr const char* kProgram = "dlrover-run";
  ParsedDlroverRun cmd = ParseDlroverRunArgs(argv);
  if (auto code = ExitCodeIfNotRun(cmd, kProgram)) return *code;
  EnvMap env = CurrentEnvironment();
  std::vector<std::string> warnings;
  auto args = DlroverToTorchrun(cmd.args, env, DetectHostFacts(env), warnings);
  if (!args) return UsageError(kProgram, cmd.Blame(args.error().message));
  auto built = BuildLaunchConfig(*args, env);
  if (!built) return UsageError(kProgram, cmd.Blame(built.error().message));
  if (auto s = ApplyDlroverSettings(*args, env, *built); !s) {
    return UsageError(kProgram, cmd.Blame(s.error().message));
  }
  return RunLaunch(*built, std::move(env), warnings);
}

}  // namespace ftrun::launcher
