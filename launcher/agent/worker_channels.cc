#include "launcher/agent/worker_channels.h"

#include <fmt/format.h>
#include <signal.h>
#include <stdlib.h>

#include <filesystem>

#include "common/log.h"
#include "launcher/diagnostics/python_stack_hook.h"

namespace ftrun::launcher {

int WorkerChannels::StackDumpSignal() { return SIGRTMIN + 2; }

WorkerChannels::WorkerChannels(boost::asio::io_context& io, const LaunchConfig& config,
                               std::chrono::system_clock::time_point run_started,
                               ControlServer::Events events, CurrentGroup current)
    : io_(io),
      config_(config),
      run_started_(run_started),
      events_(std::move(events)),
      current_(std::move(current)) {}

WorkerChannels::~WorkerChannels() = default;

Status WorkerChannels::Start(const EnvMap& agent_env, const std::string& watchdog_fifo) {
  StartControl(agent_env);
  if (watchdog_fifo.empty()) return {};
  watchdog_ = std::make_unique<FileTimerServer>(io_, watchdog_fifo, [this](pid_t p) {
    const WorkerGroup* group = current_();
    return group && group->OwnsProcessGroupOf(p);
  });
  if (auto s = watchdog_->Start(); !s) {
    return Error{"TORCHELASTIC_ENABLE_FILE_TIMER=1: " + s.error().message};
  }
  return {};
}

void WorkerChannels::StartControl(const EnvMap& agent_env) {
  control_ = std::make_unique<ControlServer>(io_, events_);
  std::string root =
      Lookup(agent_env, "XDG_RUNTIME_DIR").value_or(Lookup(agent_env, "TMPDIR").value_or("/tmp"));
  if (auto s = control_->Start(root); !s) {
    if (auto fallback = control_->Start("/tmp"); !fallback) {
      LauncherLog()->warn("no worker control channel ({}); fault-time saves are off",
                          s.error().message);
      control_.reset();
      return;
    }
  }
  LauncherLog()->debug("control channel ready path={}", control_->path());
  original_pythonpath_ = Lookup(agent_env, "PYTHONPATH").value_or("");
  StartStackHook(std::filesystem::path(control_->path()).parent_path().parent_path().string());
}

// Stack dumps need no cooperation from the script: the hook registers faulthandler at start.
void WorkerChannels::StartStackHook(const std::string& root) {
  std::string tmpl = root + "/ftrun-stacks-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) {
    LauncherLog()->warn("no stack-dump directory under {}: stacks only from the helper", root);
    return;
  }
  stacks_root_ = tmpl;
  std::error_code ec;
  std::filesystem::create_directory(stacks_root_ + "/python", ec);
  std::filesystem::create_directory(stacks_root_ + "/dumps", ec);
  if (auto s = WritePythonStackHook(stacks_root_ + "/python"); ec || !s) {
    LauncherLog()->warn("no stack-dump hook ({}): stacks only from the helper",
                        ec ? ec.message() : s.error().message);
    std::filesystem::remove_all(stacks_root_, ec);
    stacks_root_.clear();
    return;
  }
  dump_dir_ = stacks_root_ + "/dumps";
}

void WorkerChannels::Stop() {
  if (watchdog_) watchdog_->Stop();
  if (control_) control_->Stop();
  if (!stacks_root_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(stacks_root_, ec);
    stacks_root_.clear();
    dump_dir_.clear();
  }
}

EnvMap WorkerChannels::WorkerEnv() const {
  if (!control_) return {};
  EnvMap env = {
      {"FTRUN_CONTROL_SOCKET", control_->path()},
      {"FTRUN_STACK_SIGNAL", std::to_string(StackDumpSignal())},
      {"FTRUN_SAVE_TIMEOUT", fmt::format("{:g}", config_.save_timeout.count())},
      // The agent keeps memory snapshots (flash checkpoint) within this many bytes.
      {"FTRUN_FLASH_MEMORY_BUDGET", std::to_string(FlashMemoryBudget(config_))},
      // Seconds since the epoch: checkpoints stored before are an earlier run's (storage.py).
      {"FTRUN_RUN_STARTED",
       fmt::format("{:.6f}",
                   std::chrono::duration<double>(run_started_.time_since_epoch()).count())},
  };
  if (!dump_dir_.empty()) {
    EnvMap original;
    if (!original_pythonpath_.empty()) original["PYTHONPATH"] = original_pythonpath_;
    for (auto& [k, v] : PythonStackHookEnv(stacks_root_ + "/python", dump_dir_, original)) {
      env[k] = v;
    }
  }
  return env;
}

void WorkerChannels::GroupStarted(const WorkerGroup& group) {
  if (!control_) return;
  std::vector<pid_t> pids;
  for (const auto& w : group.workers()) {
    if (w.local_rank >= 0) pids.push_back(w.process->pid());  // auxiliaries have no channel
  }
  control_->SetWorkers(pids, group.assignment().base_rank, group.assignment().restart_count);
}

}  // namespace ftrun::launcher
