#include "launcher/agent/agent.h"

#include <unistd.h>

#include <boost/asio/post.hpp>
#include <chrono>
#include <csignal>
#include <iostream>

#include "common/version.h"
#include "common/log.h"

namespace ftrun::launcher {
namespace {

// "worker", or the auxiliary process's name ("scheduler"), and its ranks for the log.
std::string Kind(const WorkerGroup::Worker& w) { return w.local_rank >= 0 ? "worker" : w.name; }
std::string Ranks(const WorkerGroup::Worker& w) {
  return w.local_rank >= 0 ? fmt::format("local_rank={} rank={} ", w.local_rank, w.rank) : "";
}

int64_t NowSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Agent::Agent(boost::asio::io_context& io, AgentOptions options,
             std::unique_ptr<Coordinator> coordinator)
    : io_(io),
      opts_(std::move(options)),
      config_(*opts_.config),
      coordinator_(std::move(coordinator)),
      signals_(io),
      monitor_timer_(io),
      fault_timer_(io) {}

Agent::~Agent() = default;

const char* Agent::StateName() const {
  switch (state_) {
    case State::kWaiting: return "waiting";
    case State::kRunning: return "running";
    case State::kStopping: return "stopping";
    case State::kFinished: return "finished";
  }
  return "?";
}

int Agent::Run() {
  for (int s : config_.signals) signals_.add(s);
  WaitForSignal();
  StartControlChannel();
  if (config_.metrics_port) {
    metrics_server_ =
        std::make_unique<MetricsServer>(io_, [this] { return RenderMetrics(); });
    auto port = metrics_server_->Start(*config_.metrics_port);
    if (!port) {
      LauncherLog()->error("{}", port.error().message);
      return 1;
    }
    LauncherLog()->info("metrics at http://{}:{}/metrics", opts_.host.get(), *port);
  }
  Emit(EventLog::Event("agent_started")
           .Set("version", std::string(kVersion))
           .Set("host", opts_.host.get())
           .Set("nnodes", fmt::format("{}:{}", config_.min_nodes, config_.max_nodes))
           .Set("nproc_per_node", config_.nproc_per_node)
           .Set("max_restarts", config_.max_restarts)
           .Set("entrypoint", config_.script));
  if (!opts_.watchdog_fifo.empty()) {
    watchdog_ = std::make_unique<FileTimerServer>(io_, opts_.watchdog_fifo,
                                                  [this](pid_t p) { return IsWorkerProcess(p); });
    if (auto s = watchdog_->Start(); !s) {
      LauncherLog()->error("TORCHELASTIC_ENABLE_FILE_TIMER=1: {}", s.error().message);
      return 1;
    }
  }
  StartPreflight();  // then joins the job
  io_.run();
  return exit_code_;
}

bool Agent::IsWorkerProcess(pid_t pid) const {
  if (!group_) return false;
  const pid_t pgid = ::getpgid(pid);
  for (const auto& w : group_->workers()) {
    if (w.process && !w.process->exited() && pgid == w.process->pid()) return true;
  }
  return false;
}

void Agent::WaitForSignal() {
  signals_.async_wait([this](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    OnSignal(sig);
    if (state_ != State::kFinished) WaitForSignal();
  });
}

void Agent::OnRoundStarted(const rendezvous::NodeAssignment& a) {
  if (state_ == State::kFinished) return;
  auto attempt = opts_.planner->PrepareLogs(a);
  if (!attempt) {
    LauncherLog()->error("{}", attempt.error().message);
    result_ = JobResult{false, {}, attempt.error().message};
    Finish(1);
    return;
  }
  LauncherLog()->info(
      "round started round={} restart_count={} group_rank={} group_world_size={} "
      "world_size={} master_addr={} master_port={} attempt_dir={}",
      a.round, a.restart_count, a.group_rank, a.group_world_size, a.world_size, a.master_addr,
      a.master_port, attempt->empty() ? "-" : *attempt);
  if (opts_.events) {
    opts_.events->Write(EventLog::Event("round_started")
                            .Set("restart_count", a.restart_count)
                            .Set("group_rank", a.group_rank)
                            .Set("group_world_size", a.group_world_size)
                            .Set("world_size", a.world_size)
                            .Set("base_rank", a.base_rank)
                            .Set("master", fmt::format("{}:{}", a.master_addr, a.master_port)),
                        a.round);
  }
  group_ = std::make_unique<WorkerGroup>(
      io_, a, opts_.planner->Plan(a, ControlEnv()),
      [this](const WorkerGroup::Worker& w) { OnWorkerExit(w); },
      [this] { OnGroupExited(); });
  state_ = State::kRunning;
  after_stop_ = AfterStop::kNothing;
  hung_.clear();
  fault_timer_.cancel();
  awaiting_stop_order_ = false;
  in_survivor_grace_ = false;
  ever_started_ = true;
  if (auto s = group_->Start(); !s) {
    // The program cannot be started (not found, not executable): no restart would help.
    LauncherLog()->error("{}", s.error().message);
    result_ = JobResult{false, {}, s.error().message};
    StopGroup(SIGKILL, AfterStop::kFinish);
    return;
  }
  std::vector<pid_t> pids;
  std::vector<int> ranks;
  for (const auto& w : group_->workers()) {
    if (w.local_rank < 0) continue;  // an auxiliary process has no control channel
    pids.push_back(w.process->pid());
    ranks.push_back(w.rank);
  }
  if (control_) control_->SetWorkers(pids, a.base_rank, a.restart_count);
  if (opts_.on_workers_started) {
    auto ready = std::move(opts_.on_workers_started);
    opts_.on_workers_started = nullptr;
    ready();
  }
  ++metrics_.rounds;
  metrics_.restart_count = a.restart_count;
  metrics_.members = a.group_world_size;
  metrics_.world_size = a.world_size;
  if (metrics_.fault_at != std::chrono::steady_clock::time_point{}) {
    metrics_.time_to_recover =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - metrics_.fault_at)
            .count();
    metrics_.fault_at = {};
  }
  Emit(EventLog::Event("workers_spawned")
           .Set("attempt", a.restart_count)
           .Set("ranks", ranks)
           .Set("pids", std::vector<int>(pids.begin(), pids.end())));
  ArmMonitor();
}

void Agent::OnWorkerExit(const WorkerGroup::Worker& w) {
  const ExitStatus& st = *w.status;
  const int attempt = group_->assignment().restart_count;
  Emit(EventLog::Event("worker_exited")
           .Set("local_rank", w.local_rank)
           .Set("rank", w.rank)
           .Set("pid", static_cast<int>(w.process->pid()))
           .Set("exitcode", st.TorchExitCode())
           .Set("status", st.Describe())
           .Set("outcome", std::string(st.Succeeded()           ? "succeeded"
                                       : state_ == State::kRunning ? "failed"
                                                                   : "stopped")));
  if (st.Succeeded()) {
    LauncherLog()->info("{} exited {}pid={} attempt={} status={}", Kind(w), Ranks(w), w.process->pid(),
                attempt, st.Describe());
    if (in_survivor_grace_ && LiveRanks() == 0) EndSurvivorGrace();
    if (state_ != State::kRunning || group_->live_count() != 0) return;
    for (const auto& other : group_->workers()) {
      if (!other.status || !other.status->Succeeded()) return;
    }
    LauncherLog()->info("worker group succeeded attempt={}", attempt);
    coordinator_->WorkersSucceeded();
    return;
  }
  if (state_ != State::kRunning) {
    LauncherLog()->info("{} stopped {}pid={} attempt={} status={}", Kind(w), Ranks(w), w.process->pid(),
                attempt, st.Describe());
    if (in_survivor_grace_ && LiveRanks() == 0) EndSurvivorGrace();
    return;
  }
  LauncherLog()->error("failed (exitcode: {}) local_rank: {} (pid: {}) of binary: {} rank={} attempt={}",
               st.TorchExitCode(), w.local_rank, w.process->pid(), w.program, w.rank, attempt);
  opts_.planner->OnProcessFailed(w.process->pid(), w.local_rank, st.TorchExitCode());
  OnLocalFailure(DescribeFailure(w.local_rank, w.rank, w.process->pid(), st, w.error_file,
                                 opts_.host.get(), NowSeconds()));
}

void Agent::OnRestartRequested(const std::string& reason) {
  LauncherLog()->info("restart requested reason=\"{}\" state={}", reason, StateName());
  if (metrics_.fault_at == std::chrono::steady_clock::time_point{}) {
    metrics_.fault_at = std::chrono::steady_clock::now();  // a stop without a local fault
  }
  switch (state_) {
    case State::kRunning:
      StopGroup(SIGTERM, AfterStop::kReportStopped, true);
      break;
    case State::kStopping:
      if (after_stop_ == AfterStop::kNothing) after_stop_ = AfterStop::kReportStopped;
      break;
    case State::kWaiting:
      coordinator_->WorkersStopped();  // already stopped; the coordinator ignores repeats
      break;
    case State::kFinished:
      break;
  }
}

void Agent::OnRoundStopping(uint64_t round, const std::string& reason, int restart_count) {
  if (!opts_.events) return;
  opts_.events->Write(EventLog::Event("restart")
                          .Set("reason", reason)
                          .Set("restart_count", restart_count),
                      round);
}

void Agent::OnJobFinished(const JobResult& result) {
  if (state_ == State::kFinished) return;
  result_ = result;
  const int code = result.succeeded ? 0 : 1;
  if (group_ && group_->live_count() > 0) {
    StopGroup(SIGTERM, AfterStop::kFinish, !result.succeeded);
    return;
  }
  Finish(code);
}

void Agent::StopGroup(int sig, AfterStop after, bool survivors_may_save) {
  if (after > after_stop_) after_stop_ = after;
  if (!group_) {
    // The group has already exited (and reported it): continue from there.
    state_ = State::kStopping;
    boost::asio::post(io_, [this] { OnGroupExited(); });
    return;
  }
  const bool first = state_ != State::kStopping;
  state_ = State::kStopping;
  if (first && survivors_may_save && config_.survivor_grace.count() > 0 && LiveRanks() > 0) {
    // MindIO TTP saves on its own and then exits the survivors: stop them only if it has not
    // finished within the grace (TTP_OT).
    LauncherLog()->info("waiting up to {:g}s for the surviving workers to save and exit attempt={}",
                config_.survivor_grace.count(), group_->assignment().restart_count);
    in_survivor_grace_ = true;
    grace_signal_ = sig;
    fault_timer_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        config_.survivor_grace));
    fault_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (ec || !in_survivor_grace_) return;
      LauncherLog()->warn("the surviving workers are still running after {:g}s; stopping them",
                  config_.survivor_grace.count());
      EndSurvivorGrace();
    });
    return;
  }
  if (in_survivor_grace_ && !survivors_may_save) {
    in_survivor_grace_ = false;  // e.g. a signal: stop now
  } else if (in_survivor_grace_) {
    return;  // the grace goes on
  }
  if (first) {
    LauncherLog()->info("stopping workers signal={} grace={}ms attempt={}", SignalName(sig),
                config_.shutdown_timeout.count(), group_->assignment().restart_count);
  }
  fault_timer_.cancel();
  group_->Stop(sig, config_.shutdown_timeout);
}

void Agent::EndSurvivorGrace() {
  if (!in_survivor_grace_) return;
  in_survivor_grace_ = false;
  fault_timer_.cancel();
  if (!group_) return;
  LauncherLog()->info("stopping workers signal={} grace={}ms attempt={}", SignalName(grace_signal_),
              config_.shutdown_timeout.count(), group_->assignment().restart_count);
  group_->Stop(grace_signal_, config_.shutdown_timeout);
}

size_t Agent::LiveRanks() const {
  size_t n = 0;
  if (!group_) return n;
  for (const auto& w : group_->workers()) {
    if (w.local_rank >= 0 && w.process && !w.process->exited()) ++n;
  }
  return n;
}

void Agent::OnGroupExited() {
  if (group_) {
    // We are inside the group's own callback: destroy it later.
    boost::asio::post(io_, [g = std::shared_ptr<WorkerGroup>(std::move(group_))] {});
  }
  if (state_ == State::kFinished) return;
  switch (after_stop_) {
    case AfterStop::kNothing:
      break;  // all exited 0; the coordinator's verdict follows
    case AfterStop::kReportStopped:
      state_ = State::kWaiting;
      after_stop_ = AfterStop::kNothing;
      coordinator_->WorkersStopped();
      break;
    case AfterStop::kFinish:
      if (stop_signal_ != 0 && opts_.signal_exit_code) {
        Finish(opts_.signal_exit_code(stop_signal_));
      } else {
        Finish(stop_signal_ != 0 || !result_ || !result_->succeeded ? 1 : 0);
      }
      break;
  }
}

void Agent::OnSignal(int sig) {
  Emit(EventLog::Event("signal").Set("signal", SignalName(sig)));
  if (!ever_started_) {
    // Before any worker started, torchrun dies of the signal itself; so do we.
    LauncherLog()->warn("received {} before any worker started; exiting", SignalName(sig));
    std::signal(sig, SIG_DFL);
    ::raise(sig);
    return;
  }
  if (stop_signal_ != 0 && group_ && group_->live_count() > 0) {
    LauncherLog()->warn("received {} again; killing the workers now", SignalName(sig));
    group_->Stop(SIGKILL, std::chrono::milliseconds(0));
    return;
  }
  LauncherLog()->warn("Received {} death signal ({}), shutting down workers", sig, SignalName(sig));
  stop_signal_ = sig;
  coordinator_->Shutdown();
  result_ = JobResult{false, {}, "stopped by " + SignalName(sig)};
  StopGroup(sig, AfterStop::kFinish);
}

void Agent::Finish(int exit_code) {
  if (state_ == State::kFinished) return;
  state_ = State::kFinished;
  exit_code_ = exit_code;
  in_survivor_grace_ = false;
  boost::system::error_code ec;
  signals_.cancel(ec);
  monitor_timer_.cancel();
  fault_timer_.cancel();
  if (watchdog_) watchdog_->Stop();
  if (control_) control_->Stop();
  if (metrics_server_) metrics_server_->Stop();
  if (check_runner_) check_runner_->Cancel();
  switchbox_.reset();
  coordinator_->Shutdown();
  if (result_) ReportOutcome(*result_);
}

void Agent::ReportOutcome(const JobResult& r) {
  Emit(EventLog::Event("job_finished")
           .Set("outcome", std::string(r.succeeded && exit_code_ == 0 ? "succeeded" : "failed"))
           .Set("exit_code", exit_code_)
           .Set("reason", r.reason));
  if (r.succeeded && exit_code_ == 0) {
    LauncherLog()->info("job finished outcome=succeeded exit_code=0");
    return;
  }
  LauncherLog()->error("job finished outcome=failed exit_code={} reason=\"{}\"", exit_code_, r.reason);
  if (r.failures.empty()) return;
  opts_.planner->ReportFailure(r.failures, std::cerr);
  if (auto path = Lookup(opts_.agent_env, "TORCHELASTIC_ERROR_FILE")) {
    const WorkerFailure& root = r.failures[RootCauseIndex(r.failures)];
    if (auto s = WriteAgentErrorFile(*path, root); !s) LauncherLog()->warn("{}", s.error().message);
  }
}

}  // namespace ftrun::launcher
