#include "launcher/agent/agent.h"

#include <unistd.h>

#include <boost/asio/post.hpp>
#include <csignal>

#include "common/clock.h"
#include "common/log.h"
#include "launcher/agent/agent_store.h"
#include "launcher/agent/outcome.h"

namespace ftrun::launcher {
namespace {

// "worker", or the auxiliary process's name ("scheduler"), and its ranks for the log.
std::string Kind(const WorkerGroup::Worker& w) { return w.local_rank >= 0 ? "worker" : w.name; }
std::string Ranks(const WorkerGroup::Worker& w) {
  return w.local_rank >= 0 ? fmt::format("local_rank={} rank={} ", w.local_rank, w.rank) : "";
}

}  // namespace

void Agent::Enter(AgentState next, const char* why) {
  if (next == state_) return;
  LauncherLog()->info("agent state {} -> {} ({})", StateName(state_), StateName(next), why);
  state_ = next;
}

void Agent::OnRoundStarted(const rendezvous::NodeAssignment& a) {
  if (state_ == AgentState::kFinished) return;
  if (opts_.replicas) opts_.replicas->RoundStarted(a);
  flash_.SetRestoreStep(a.restore_copy, a.restore_shards);
  LearnRunStarted(a.run_started_ms);
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
  events_.RoundStarted(a);
  history_.RoundStarted(a.round, a.restart_count, WallSeconds());
  if (!attempt->empty()) attempt_dir_ = *attempt;
  // Lets this node's store answer torch's barrier polls when they complete (store_server.h).
  if (opts_.store) opts_.store->SetWorldSize(a.world_size);
  group_ = std::make_unique<WorkerGroup>(
      io_, spawner_, clock_, a, opts_.planner->Plan(a, channels_.WorkerEnv()),
      [this](const WorkerGroup::Worker& w) { OnWorkerExit(w); }, [this] { OnGroupExited(); });
  events_.SetRound(a.round);
  Enter(AgentState::kRunning, "round started");
  after_stop_ = AfterStop::kNothing;
  fault_timer_->Cancel();
  ever_started_ = true;
  if (auto s = group_->Start(); !s) {
    // The program cannot be started (not found, not executable): no restart would help.
    LauncherLog()->error("{}", s.error().message);
    result_ = JobResult{false, {}, s.error().message};
    StopGroup(SIGKILL, AfterStop::kFinish);
    return;
  }
  channels_.GroupStarted(*group_);
  if (opts_.on_workers_started) {
    auto ready = std::move(opts_.on_workers_started);
    opts_.on_workers_started = nullptr;
    ready();
  }
  metrics_.RoundStarted(a);
  events_.WorkersSpawned(*group_);
  hangs_.Watch(group_.get());
}

void Agent::OnWorkerExit(const WorkerGroup::Worker& w) {
  const ExitStatus& st = *w.status;
  if (w.local_rank >= 0) {
    // What the rank said just before it died counts: a snapshot commit waits for no answer.
    if (ControlServer* control = channels_.control()) control->Drain(w.local_rank);
    flash_.WorkerExited(w.local_rank);
    relay_.OnRankExited(w.local_rank);
  }
  const int attempt = group_->assignment().restart_count;
  const bool live = WorkersLive(state_);
  events_.WorkerExited(w, st.Succeeded() ? "succeeded" : live ? "failed" : "stopped");
  if (st.Succeeded()) {
    LauncherLog()->info("{} exited {}pid={} attempt={} status={}", Kind(w), Ranks(w),
                        w.process->pid(), attempt, st.Describe());
    if (state_ == AgentState::kSurvivorGrace && group_->live_rank_count() == 0) EndSurvivorGrace();
    if (!live || group_->live_count() != 0) return;
    for (const auto& other : group_->workers()) {
      if (!other.status || !other.status->Succeeded()) return;
    }
    LauncherLog()->info("worker group succeeded attempt={}", attempt);
    coordinator_->WorkersSucceeded();
    return;
  }
  if (!live) {
    LauncherLog()->info("{} stopped {}pid={} attempt={} status={}", Kind(w), Ranks(w),
                        w.process->pid(), attempt, st.Describe());
    if (state_ == AgentState::kSurvivorGrace && group_->live_rank_count() == 0) EndSurvivorGrace();
    return;
  }
  LauncherLog()->error(
      "failed (exitcode: {}) local_rank: {} (pid: {}) of binary: {} rank={} attempt={}",
      st.TorchExitCode(), w.local_rank, w.process->pid(), w.program, w.rank, attempt);
  opts_.planner->OnProcessFailed(w.process->pid(), w.local_rank, st.TorchExitCode());
  OnLocalFailure(DescribeFailure(w.local_rank, w.rank, w.process->pid(), st, w.error_file,
                                 opts_.host.get(), WallSeconds()));
}

void Agent::OnLocalFailure(const WorkerFailure& failure) {
  metrics_.WorkerFailed(failure.timestamp);
  // A hang was there since the rank's last progress report: that silence is the detection.
  // (The hang detector's verdict: exit code 124 for a rank that is still running.)
  bool hang = false;
  if (group_ && failure.exitcode == 124) {
    for (const auto& w : group_->workers()) {
      if (w.local_rank == failure.local_rank && w.process && !w.process->exited()) hang = true;
    }
  }
  int64_t detect_ms = 0;
  if (const ControlServer* control = channels_.control();
      hang && control && failure.local_rank >= 0 && failure.local_rank < control->rank_count()) {
    const RankControl& rc = control->rank(failure.local_rank);
    if (rc.progress_seen) {
      detect_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - rc.last_progress)
                      .count();
    }
  }
  events_.FaultDetected(hang ? "hang" : "exit", &failure, "", NewestStep(true).value_or(-1),
                        NewestSnapshot().value_or(-1), detect_ms);
  events_.FaultReported(failure);
  history_.LocalFailure(failure);
  coordinator_->WorkersFailed({failure});
  if (!relay_.LocalRanksCanSave()) {
    StopGroup(SIGTERM, AfterStop::kReportStopped, true);
    return;
  }
  // The surviving ranks stay up until the round's save is over and the stop is ordered; if
  // no order comes (the server is gone), stop anyway.
  if (state_ == AgentState::kHoldingForSave) return;
  Enter(AgentState::kHoldingForSave, "a rank failed; the survivors can save");
  LauncherLog()->info("keeping the surviving workers for the fault-time save (up to {:g}s)",
                      config_.save_timeout.count());
  fault_timer_->Start(ClockDuration(config_.save_timeout + std::chrono::seconds(10)), [this] {
    if (!WorkersLive(state_)) return;
    LauncherLog()->warn("no stop order after the failure; stopping the workers");
    StopGroup(SIGTERM, AfterStop::kReportStopped);
  });
}

void Agent::OnRestartRequested(const std::string& reason) {
  LauncherLog()->info("restart requested reason=\"{}\" state={}", reason, StateName(state_));
  history_.RoundStopping(reason);
  metrics_.StopAsked();
  if (state_ == AgentState::kRunning) {
    // Nothing failed here: this node learns of the fault (or the new membership) now.
    events_.FaultDetected("elsewhere", nullptr, reason, NewestStep(true).value_or(-1),
                          NewestSnapshot().value_or(-1), 0);
  }
  switch (state_) {
    case AgentState::kRunning:
    case AgentState::kHoldingForSave:
      StopGroup(SIGTERM, AfterStop::kReportStopped, true);
      break;
    case AgentState::kSurvivorGrace:
    case AgentState::kStopping:
      if (after_stop_ == AfterStop::kNothing) after_stop_ = AfterStop::kReportStopped;
      break;
    case AgentState::kWaiting:
      coordinator_->WorkersStopped();  // already stopped; the coordinator ignores repeats
      break;
    case AgentState::kFinished:
      break;
  }
}

void Agent::OnRoundStopping(uint64_t round, const std::string& reason, int restart_count) {
  events_.RoundStopping(round, reason, restart_count);
}

void Agent::OnSaveOrder(uint64_t round, const rendezvous::SaveOrder& order) {
  relay_.OnSaveOrder(round, order);
}

void Agent::OnCheckOrder(uint64_t round, const rendezvous::CheckOrder& order) {
  preflight_.OnCheckOrder(round, order);
}

void Agent::OnCheckFinished(uint64_t check_id, const std::vector<std::string>& table,
                            const std::string& json) {
  preflight_.OnCheckFinished(check_id, table, json);
}

void Agent::OnExcluded(const std::string& reason) { ExitExcluded(reason); }

void Agent::OnWaitingAsSpare(uint64_t round) {
  if (state_ != AgentState::kWaiting || group_) return;
  LauncherLog()->info(
      "waiting as a spare round={}: the round runs without this node, which "
      "takes the place of a node that is lost",
      round);
  events_.Emit(EventLog::Event("waiting_as_spare").Set("round", static_cast<int64_t>(round)));
  PrepareOutsideRound(round);
}

void Agent::OnWaitingForNodeUnit(uint64_t round) {
  if (state_ != AgentState::kWaiting || group_) return;
  LauncherLog()->info(
      "waiting round={}: the round runs without this node until enough nodes join to make a "
      "whole --node-unit {} (or a node is lost)",
      round, config_.node_unit);
  events_.Emit(EventLog::Event("waiting")
                   .Set("round", static_cast<int64_t>(round))
                   .Set("node_unit", static_cast<int64_t>(config_.node_unit)));
  PrepareOutsideRound(round);
}

void Agent::PrepareOutsideRound(uint64_t round) {
  if (!config_.warm_restart.enabled) return;
  // The workers this node would start (the numbers of the round come at the promotion and are
  // handed over then): the standbys for them get ready now.
  rendezvous::NodeAssignment a;
  a.round = round;
  a.max_restarts = config_.max_restarts;
  a.world_size = config_.nproc_per_node;
  std::vector<ProcessSpec> specs;
  for (auto& p : opts_.planner->Plan(a, channels_.WorkerEnv())) {
    if (p.local_rank < 0) continue;  // an auxiliary process starts cold anyway
    ProcessSpec s;
    s.program = std::move(p.program);
    s.args = std::move(p.args);
    s.env = std::move(p.env);
    specs.push_back(std::move(s));
  }
  spawner_.Prepare(specs);
}

void Agent::OnStacksOrder(uint64_t /*round*/, uint64_t stacks_id) { stacks_.OnOrder(stacks_id); }

void Agent::OnJobFinished(const JobResult& result) {
  if (state_ == AgentState::kFinished) return;
  result_ = result;
  if (group_ && group_->live_count() > 0) {
    StopGroup(SIGTERM, AfterStop::kFinish, !result.succeeded);
    return;
  }
  Finish(result.succeeded ? 0 : 1);
}

void Agent::StopGroup(int sig, AfterStop after, bool survivors_may_save) {
  if (after > after_stop_) after_stop_ = after;
  hangs_.Stop();
  if (!group_) {
    // The group has already exited (and reported it): continue from there.
    Enter(AgentState::kStopping, "stop after the group exited");
    boost::asio::post(io_, [this] { OnGroupExited(); });
    return;
  }
  const bool first = !Stopping(state_);
  if (first && survivors_may_save && config_.survivor_grace.count() > 0 &&
      group_->live_rank_count() > 0) {
    // MindIO TTP saves on its own and then exits the survivors: stop them only if it has not
    // finished within the grace (TTP_OT).
    Enter(AgentState::kSurvivorGrace, "the survivors may save and exit first");
    LauncherLog()->info("waiting up to {:g}s for the surviving workers to save and exit attempt={}",
                        config_.survivor_grace.count(), group_->assignment().restart_count);
    grace_signal_ = sig;
    fault_timer_->Start(ClockDuration(config_.survivor_grace), [this] {
      if (state_ != AgentState::kSurvivorGrace) return;
      LauncherLog()->warn("the surviving workers are still running after {:g}s; stopping them",
                          config_.survivor_grace.count());
      EndSurvivorGrace();
    });
    return;
  }
  if (state_ == AgentState::kSurvivorGrace && survivors_may_save) return;  // it goes on
  const AgentState before = state_;
  if (before == AgentState::kHoldingForSave || before == AgentState::kSurvivorGrace) {
    events_.FaultSaveDone(before == AgentState::kSurvivorGrace ? "stopped during the grace"
                                                               : "stop ordered");
  }
  // A stop that cannot wait (e.g. a signal) ends the grace: stop now.
  Enter(AgentState::kStopping, "stopping the workers");
  if (first || before == AgentState::kSurvivorGrace) {
    LauncherLog()->info("stopping workers signal={} grace={}ms attempt={}", SignalName(sig),
                        config_.shutdown_timeout.count(), group_->assignment().restart_count);
    events_.WorkersStopping(sig, group_->assignment().restart_count);
  }
  fault_timer_->Cancel();
  group_->Stop(sig, config_.shutdown_timeout);
}

void Agent::EndSurvivorGrace() {
  if (state_ != AgentState::kSurvivorGrace) return;
  Enter(AgentState::kStopping, "the survivors' grace is over");
  fault_timer_->Cancel();
  events_.FaultSaveDone("grace over");
  if (!group_) return;
  LauncherLog()->info("stopping workers signal={} grace={}ms attempt={}", SignalName(grace_signal_),
                      config_.shutdown_timeout.count(), group_->assignment().restart_count);
  events_.WorkersStopping(grace_signal_, group_->assignment().restart_count);
  group_->Stop(grace_signal_, config_.shutdown_timeout);
}

void Agent::OnGroupExited() {
  // The one copy of a data-parallel job is written at a breakpoint by one node only.
  const bool one_copy = !group_ || group_->assignment().group_rank == 0;
  if (group_) {
    // The hang detector reads the group it watches: it must stop before the group goes (on
    // success no StopGroup ran, and the verdict may take a round trip to the server).
    hangs_.Stop();
    if (after_stop_ != AfterStop::kNothing) {
      events_.WorkersStopped(group_->assignment().restart_count);
    }
    // We are inside the group's own callback: destroy it later.
    boost::asio::post(io_, [g = std::shared_ptr<WorkerGroup>(std::move(group_))] {});
    events_.SetRound(std::nullopt);
  }
  if (state_ == AgentState::kFinished) return;
  switch (after_stop_) {
    case AfterStop::kNothing:
      break;  // all exited 0; the coordinator's verdict follows
    case AfterStop::kReportStopped:
      Enter(AgentState::kWaiting, "the workers stopped");
      after_stop_ = AfterStop::kNothing;
      if (config_.flash_persist_at_breakpoint) flash_.PersistAtBreakpoint(one_copy);
      // The next round cannot start before this report, so a round that keeps the attempt
      // number (a membership change) starts from an empty /worker/attempt_<n> prefix.
      if (opts_.store) {
        if (size_t n = opts_.store->DropPrefix(kWorkerKeysPrefix)) {
          LauncherLog()->debug("agent store: dropped {} keys of the stopped workers", n);
        }
      }
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
  events_.Signal(sig);
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

}  // namespace ftrun::launcher
