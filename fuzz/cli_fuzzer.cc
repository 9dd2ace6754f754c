// Fuzz target: a personality's command line, from the parser to the configuration the agent
// runs. Built three times (fuzz/CMakeLists.txt): FTRUN_FUZZ_CLI 0 torchrun, 1 dlrover-run,
// 2 msrun. The input is one argument per line; "@env KEY=VALUE" lines form the environment
// (fuzz_support.h). For any input: no crash, no exception, no sanitizer report, and every
// configuration that is accepted can be used the way the agent uses it (its durations armed as
// timers, its rendezvous settings given to the rendezvous state machine).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fuzz/fuzz_support.h"
#include "launcher/cli/msrun_args.h"
#include "launcher/cli/torchrun_args.h"
#include "launcher/config/launch_config.h"
#include "launcher/coordinator/job_setup.h"
#include "launcher/coordinator/local_coordinator.h"
#include "launcher/personality/dlrover/dlrover_config.h"
#include "launcher/personality/msrun/msrun_config.h"
#include "rendezvous/rendezvous_state.h"

namespace ftrun::fuzz {
namespace {

using namespace launcher;
using rendezvous::Duration;

// The job the agent's rendezvous state machine gets (LocalCoordinator's for one node).
rendezvous::JobSpec SpecOf(const LaunchConfig& c) {
  return c.max_nodes == 1 ? OneNodeJob(JobSpecFrom(c)) : JobSpecFrom(c);
}

// Uses an accepted configuration as the agent does; a value it cannot use is a finding.
void UseConfig(LaunchConfig c, const EnvMap& env) {
  HostFacts host;
  host.cpu_count = 4;
  host.gpu_count = CountVisibleGpus(8, Lookup(env, "CUDA_VISIBLE_DEVICES"));
  (void)ResolveNprocPerNode(c, host);
  FTRUN_FUZZ_CHECK(c.nproc_per_node > 0, "nproc_per_node " + std::to_string(c.nproc_per_node));
  FTRUN_FUZZ_CHECK(c.min_nodes >= 1 && c.min_nodes <= c.max_nodes, "nnodes");
  FTRUN_FUZZ_CHECK(c.max_nodes % c.node_unit == 0 && c.min_nodes % c.node_unit == 0,
                   "node_unit " + std::to_string(c.node_unit));
  // Per-rank stream masks (torchrun_plan.cc), with a bounded rank count.
  const int nproc = std::min(c.nproc_per_node, 64);
  FTRUN_FUZZ_CHECK(ParseStdSpec("--redirects", c.redirects_spec, nproc).has_value(), "redirects");
  FTRUN_FUZZ_CHECK(ParseStdSpec("--tee", c.tee_spec, nproc).has_value(), "tee");

  // The agent's timers (agent.cc, agent_fault.cc, agent_check.cc, netcheck/check_runner.cc,
  // worker_group.cc) and the rendezvous client's deadlines (rendezvous_client.cc).
  (void)DeadlineAfter(c.monitor_interval);
  (void)DeadlineAfter(c.save_timeout + std::chrono::seconds(10));
  (void)DeadlineAfter(c.survivor_grace);
  (void)DeadlineAfter(c.shutdown_timeout);
  (void)DeadlineAfter(c.preflight.timeout);
  (void)DeadlineAfter(
      std::chrono::duration_cast<std::chrono::milliseconds>(c.preflight.switchbox_timeout));
  if (c.max_nodes > 1) {
    const Duration wait = c.rdzv.keep_alive_interval;  // RemoteCoordinator's watch
    volatile uint32_t wait_ms = static_cast<uint32_t>(wait.count() * 1000);  // WatchRequest
    (void)wait_ms;
    const Duration call = std::min<Duration>(c.rdzv.read_timeout, Duration(10));
    (void)(std::chrono::system_clock::now() +
           std::chrono::duration_cast<std::chrono::milliseconds>(wait + call));
  }

  // The rendezvous state machine with this node joined, as the coordinators run it.
  const auto t0 = rendezvous::Clock::now();
  rendezvous::RendezvousState state(SpecOf(c), t0);
  rendezvous::NodeInfo node;
  node.node_id = "fuzz-node";
  node.addr = c.local_addr.empty() ? "127.0.0.1" : c.local_addr;
  node.host = "fuzz-host";
  node.node_rank = c.backend == RendezvousBackend::kStatic ? c.node_rank : -1;
  node.nproc_per_node = c.nproc_per_node;
  node.free_port = 29500;
  node.probe_port = state.spec().check.enabled ? 29401 : 0;
  (void)state.Join(node, t0);
  (void)state.NextDeadline();
  state.Tick(t0 + std::chrono::seconds(1));
  (void)state.NextDeadline();
  (void)state.View(node.node_id);
}

#if FTRUN_FUZZ_CLI == 0 || FTRUN_FUZZ_CLI == 1
// Builds the configuration of a parsed command line (torchrun's or dlrover-run's) as
// RunTorchrun and RunDlroverRun do, `rewrite` and `apply` being the personality's steps around
// BuildLaunchConfig.
template <class Args, class Rewrite, class Apply>
void RunLauncher(const Parsed<Args>& cmd, const EnvMap& env, Rewrite rewrite, Apply apply) {
  if (cmd.action == ParseAction::kUsageError) {
    FTRUN_FUZZ_CHECK(!cmd.error.empty(), "a usage error without a message");
    return;
  }
  if (cmd.action != ParseAction::kRun) return;
  std::vector<std::string> warnings;
  auto args = rewrite(cmd.args, warnings);
  if (!args) return;
  auto built = BuildLaunchConfig(*args, env);
  if (!built) {
    FTRUN_FUZZ_CHECK(!built.error().message.empty(), "an error without a message");
    return;
  }
  if (!apply(*args, *built)) return;
  UseConfig(std::move(*built), env);
}

#if FTRUN_FUZZ_CLI == 0
void RunTorchrun(const CommandLine& in) {
  RunLauncher(
      ParseTorchrunArgs(in.argv), in.env,
      [](const TorchrunArgs& a, std::vector<std::string>&) { return std::optional(a); },
      [](const TorchrunArgs&, LaunchConfig&) { return true; });
}

#else
void RunDlroverRun(const CommandLine& in) {
  const EnvMap& env = in.env;
  HostFacts host;
  host.gpu_count = CountVisibleGpus(8, Lookup(env, "CUDA_VISIBLE_DEVICES"));
  RunLauncher(
      ParseDlroverRunArgs(in.argv), env,
      [&](const DlroverArgs& a, std::vector<std::string>& warnings) {
        return DlroverToTorchrun(a, env, host, warnings);
      },
      [&](const DlroverArgs& a, LaunchConfig& c) { return bool(ApplyDlroverSettings(a, env, c)); });
}
#endif
#else
void RunMsrun(const CommandLine& in) {
  ParsedMsrun cmd = ParseMsrunArgs(in.argv);
  if (cmd.action == ParsedMsrun::Action::kUsageError) {
    FTRUN_FUZZ_CHECK(!cmd.error.empty(), "a usage error without a message");
    return;
  }
  if (cmd.action != ParsedMsrun::Action::kRun) return;
  static const std::vector<int> kCpus = {0, 1, 2, 3, 4, 5, 6, 7};
  auto built = BuildMsrunConfig(cmd.args, in.env, kCpus);
  if (!built) {
    FTRUN_FUZZ_CHECK(!built.error().message.empty(), "an error without a message");
    return;
  }
  FTRUN_FUZZ_CHECK(!built->command.empty(), "no command");
  FTRUN_FUZZ_CHECK(built->launch.nproc_per_node == built->local_worker_num, "nproc");
  (void)CpuRanges(kCpus);
  UseConfig(std::move(built->launch), in.env);
}
#endif

}  // namespace
}  // namespace ftrun::fuzz

FTRUN_FUZZ_INITIALIZE()

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 4096) return -1;  // a command line, not a file
  const auto in = ftrun::fuzz::SplitInput(data, size);
#if FTRUN_FUZZ_CLI == 0
  ftrun::fuzz::RunTorchrun(in);
#elif FTRUN_FUZZ_CLI == 1
  ftrun::fuzz::RunDlroverRun(in);
#else
  ftrun::fuzz::RunMsrun(in);
#endif
  return 0;
}
