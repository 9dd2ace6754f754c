#include "launcher/personality/torchrun/torchrun_plan.h"

#include <unistd.h>

#include <filesystem>

#include "launcher/workers/template.h"
#include "launcher/workers/worker_env.h"

namespace ftrun::launcher {
namespace {

// --run-path: torchrun runs the script with runpy.run_path in a child interpreter.
constexpr const char* kRunPathShim =
    "import runpy, sys; sys.argv = sys.argv[1:]; "
    "runpy.run_path(sys.argv[0], run_name='__main__')";

}  // namespace

WorkerCommand BuildWorkerCommand(const LaunchConfig& c, int local_rank) {
  const std::map<std::string, std::string> vars = {{"local_rank", std::to_string(local_rank)}};
  WorkerCommand cmd;
  std::vector<std::string> args;
  switch (c.entry) {
    case EntryKind::kNoPython:
      cmd.program = c.script;
      break;
    case EntryKind::kPython:
      cmd.program = c.python;
      args = {"-u", c.script};
      break;
    case EntryKind::kModule:
      cmd.program = c.python;
      args = {"-u", "-m", c.script};
      break;
    case EntryKind::kRunPath:
      cmd.program = c.python;
      args = {"-u", "-c", kRunPathShim, c.script};
      break;
  }
  args.insert(args.end(), c.script_args.begin(), c.script_args.end());
  for (auto& a : args) cmd.args.push_back(SafeSubstitute(a, vars));
  if (local_rank >= 0 && local_rank < static_cast<int>(c.rank_command_prefix.size()) &&
      !c.rank_command_prefix[local_rank].empty()) {
    const auto& prefix = c.rank_command_prefix[local_rank];
    cmd.args.insert(cmd.args.begin(), cmd.program);
    cmd.args.insert(cmd.args.begin(), prefix.begin() + 1, prefix.end());
    cmd.program = prefix.front();
  }
  return cmd;
}

TorchrunPlanner::TorchrunPlanner(const LaunchConfig& config, EnvMap agent_env, RunLogDir log_dir)
    : config_(config), agent_env_(std::move(agent_env)), log_dir_(std::move(log_dir)) {}

Result<std::string> TorchrunPlanner::PrepareLogs(const rendezvous::NodeAssignment& a) {
  auto dir = log_dir_.PrepareAttempt(a.restart_count, config_.nproc_per_node);
  if (!dir) return dir.error();
  attempt_dir_ = *dir;
  auto open_filter = [&](const std::vector<std::string>& filters, const char* name) {
    auto f = std::make_shared<SharedFile>();
    if (!filters.empty() && !attempt_dir_.empty()) {
      f->fd = OpenLogFile((std::filesystem::path(attempt_dir_) / name).string(), true);
    }
    return f;
  };
  filtered_stdout_ = open_filter(config_.duplicate_stdout_filters, "filtered_stdout.log");
  filtered_stderr_ = open_filter(config_.duplicate_stderr_filters, "filtered_stderr.log");
  return Ok(attempt_dir_);
}

StreamPlan TorchrunPlanner::Stream(int local_rank, int rank, bool is_out, int redirect,
                                   int tee) const {
  const LaunchConfig& c = config_;
  const int bit = is_out ? kStdOut : kStdErr;
  const bool shown = !c.local_ranks_filter || c.local_ranks_filter->count(local_rank) != 0;
  const std::string file =
      RunLogDir::RankFile(attempt_dir_, local_rank, is_out ? "stdout.log" : "stderr.log");
  StreamPlan s;
  if (tee & bit) {
    s.kind = StreamPlan::Kind::kTee;
    s.file = file;
    s.tee.log_file = file;
    s.tee.console_fd = shown ? (is_out ? STDOUT_FILENO : STDERR_FILENO) : -1;
    std::string tmpl =
        c.line_prefix_template.empty() ? "[${role_name}${local_rank}]:" : c.line_prefix_template;
    s.tee.prefix = SafeSubstitute(tmpl, {{"role_name", c.role},
                                         {"rank", std::to_string(rank)},
                                         {"local_rank", std::to_string(local_rank)}});
    s.tee.filters = is_out ? c.duplicate_stdout_filters : c.duplicate_stderr_filters;
    s.tee.filter_file = is_out ? filtered_stdout_ : filtered_stderr_;
  } else if (redirect & bit) {
    s.kind = StreamPlan::Kind::kFile;
    s.file = file.empty() ? "/dev/null" : file;
  } else if (!shown) {
    s.kind = StreamPlan::Kind::kFile;
    s.file = "/dev/null";  // --local-ranks-filter silences the other ranks
  }
  return s;
}

std::vector<ProcessPlan> TorchrunPlanner::Plan(const rendezvous::NodeAssignment& a,
                                               const EnvMap& extra_env) {
  const LaunchConfig& c = config_;
  const int nproc = c.nproc_per_node;
  // Validated at start-up, so these cannot fail here.
  const std::vector<int> redirects = ParseStdSpec("--redirects", c.redirects_spec, nproc).value();
  const std::vector<int> tees = ParseStdSpec("--tee", c.tee_spec, nproc).value();
  std::vector<ProcessPlan> plans;
  for (int lr = 0; lr < nproc; ++lr) {
    ProcessPlan p;
    p.local_rank = lr;
    p.rank = a.base_rank + lr;
    p.name = "local_rank " + std::to_string(lr);
    p.error_file = RunLogDir::RankFile(attempt_dir_, lr, "error.json");
    WorkerCommand cmd = BuildWorkerCommand(c, lr);
    p.program = cmd.program;
    p.args = cmd.args;
    p.env = BuildWorkerEnv({agent_env_, c, a, lr, p.error_file});
    for (const auto& [k, v] : extra_env) p.env[k] = v;
    const int redirect = redirects[lr] | tees[lr];  // tee implies redirect
    p.out = Stream(lr, p.rank, true, redirect, tees[lr]);
    p.err = Stream(lr, p.rank, false, redirect, tees[lr]);
    plans.push_back(std::move(p));
  }
  return plans;
}

}  // namespace ftrun::launcher
