// Agent, continued: the worker control channel, the fault-time save and hang detection.
#include <signal.h>

#include <algorithm>
#include <boost/asio/post.hpp>

#include "launcher/agent/agent.h"
#include "common/log.h"

namespace ftrun::launcher {
namespace {

// The signal on which the Python helper dumps every thread's stack (faulthandler).
int StackDumpSignal() { return SIGRTMIN + 2; }

}  // namespace

void Agent::StartControlChannel() {
  ControlServer::Events ev;
  ev.on_saved = [this](int lr, uint64_t id, bool finalize, bool ok, const std::string& err) {
    OnRankSaved(lr, id, finalize, ok, err);
  };
  ev.on_peer_failed = [this](int lr, const std::string& err) {
    LauncherLog()->info("local_rank={} reports a failed collective ({}); it waits for orders", lr, err);
  };
  control_ = std::make_unique<ControlServer>(io_, ev);
  std::string root = Lookup(opts_.agent_env, "XDG_RUNTIME_DIR")
                         .value_or(Lookup(opts_.agent_env, "TMPDIR").value_or("/tmp"));
  if (auto s = control_->Start(root); !s) {
    if (auto fallback = control_->Start("/tmp"); !fallback) {
      LauncherLog()->warn("no worker control channel ({}); fault-time saves are off", s.error().message);
      control_.reset();
      return;
    }
  }
  LauncherLog()->debug("control channel ready path={}", control_->path());
}

EnvMap Agent::ControlEnv() const {
  if (!control_) return {};
  return {
      {"FTRUN_CONTROL_SOCKET", control_->path()},
      {"FTRUN_STACK_SIGNAL", std::to_string(StackDumpSignal())},
      {"FTRUN_SAVE_TIMEOUT", fmt::format("{:g}", config_.save_timeout.count())},
  };
}

bool Agent::LocalRanksCanSave() const {
  if (!control_ || !config_.fault_save || !group_) return false;
  for (const auto& w : group_->workers()) {
    if (w.local_rank < 0) continue;
    const RankControl& rc = control_->rank(w.local_rank);
    if (w.process && !w.process->exited() && rc.connected && rc.has_handler) return true;
  }
  return false;
}

void Agent::OnLocalFailure(const WorkerFailure& failure) {
  ++metrics_.worker_failures;
  metrics_.last_fault_time = static_cast<double>(failure.timestamp);
  if (metrics_.fault_at == std::chrono::steady_clock::time_point{}) {
    metrics_.fault_at = std::chrono::steady_clock::now();
  }
  Emit(EventLog::Event("fault_reported")
           .Set("rank", failure.rank)
           .Set("local_rank", failure.local_rank)
           .Set("exitcode", failure.exitcode)
           .Set("message", failure.message.substr(0, failure.message.find('\n'))));
  coordinator_->WorkersFailed({failure});
  if (!LocalRanksCanSave()) {
    StopGroup(SIGTERM, AfterStop::kReportStopped, true);
    return;
  }
  // The surviving ranks stay up until the round's save is over and the stop is ordered; if
  // no order comes (the server is gone), stop anyway.
  if (awaiting_stop_order_) return;
  awaiting_stop_order_ = true;
  LauncherLog()->info("keeping the surviving workers for the fault-time save (up to {:g}s)",
              config_.save_timeout.count());
  fault_timer_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      config_.save_timeout + std::chrono::seconds(10)));
  fault_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || state_ != State::kRunning) return;
    LauncherLog()->warn("no stop order after the failure; stopping the workers");
    StopGroup(SIGTERM, AfterStop::kReportStopped);
  });
}

void Agent::OnSaveOrder(uint64_t round, const rendezvous::SaveOrder& order) {
  const bool ours = group_ && group_->assignment().round == round;
  if (order.collecting) {
    std::vector<rendezvous::RankProgress> ranks;
    if (ours && control_) {
      for (const auto& w : group_->workers()) {
        if (w.local_rank < 0) continue;
        const RankControl& rc = control_->rank(w.local_rank);
        rendezvous::RankProgress p;
        p.rank = w.rank;
        p.group = rc.group;
        p.step = rc.step;
        p.updating = rc.updating;
        // A silent (hung) rank still holds consistent state unless it is mid-update, and its
        // helper thread can save it: only a dead rank is unhealthy.
        p.healthy = w.process && !w.process->exited();
        p.has_handler = rc.connected && rc.has_handler;
        ranks.push_back(p);
      }
    }
    LauncherLog()->info("fault-time save {}: reporting the progress of {} rank(s)", order.id,
                ranks.size());
    Emit(EventLog::Event("save_progress_reported")
             .Set("save_id", order.id)
             .Set("ranks", static_cast<int>(ranks.size())));
    coordinator_->ReportProgress(order.id, ranks);
    return;
  }
  if (!ours) return;
  const int base = group_->assignment().base_rank;
  const int nproc = static_cast<int>(group_->rank_count());
  auto local = [&](int rank) { return rank - base >= 0 && rank - base < nproc; };
  if (order.finalize) {
    if (!local(order.finalizer)) return;
    std::vector<std::string> groups;
    for (const auto& s : order.savers) groups.push_back(s.group);
    LauncherLog()->info("fault-time save {}: asking rank {} to complete the checkpoint of step {}",
                order.id, order.finalizer, order.step);
    JsonMessage m("finalize");
    m.Set("id", static_cast<int64_t>(order.id))
        .Set("step", order.step)
        .Set("groups", groups)
        .Set("tag", fmt::format("{}-{}", round, order.id));
    if (!control_ || !control_->Send(order.finalizer - base, m.str())) {
      coordinator_->ReportSaved(order.id, order.finalizer, true, false, "rank not connected");
    }
    return;
  }
  for (const auto& s : order.savers) {
    if (!local(s.rank)) continue;
    LauncherLog()->info("fault-time save {}: asking rank {} (group '{}') to save step {}", order.id,
                s.rank, s.group, order.step);
    metrics_.save_ordered_at[order.id] = std::chrono::steady_clock::now();
    Emit(EventLog::Event("save_requested")
             .Set("save_id", order.id)
             .Set("rank", s.rank)
             .Set("group", s.group)
             .Set("step", order.step));
    JsonMessage m("save");
    m.Set("id", static_cast<int64_t>(order.id))
        .Set("step", order.step)
        .Set("group", s.group)
        .Set("finalize", order.savers.size() == 1)
        .Set("tag", fmt::format("{}-{}", round, order.id));
    if (!control_ || !control_->Send(s.rank - base, m.str())) {
      coordinator_->ReportSaved(order.id, s.rank, false, false,
                                "rank " + std::to_string(s.rank) + " is not connected");
    }
  }
}

void Agent::OnRankSaved(int local_rank, uint64_t id, bool finalize, bool ok,
                        const std::string& error) {
  if (!group_) return;
  const int rank = group_->assignment().base_rank + local_rank;
  if (ok) {
    LauncherLog()->info("fault-time save {}: rank {} {}", id, rank, finalize ? "completed it" : "saved");
  } else {
    LauncherLog()->warn("fault-time save {}: rank {} failed: {}", id, rank, error);
  }
  double secs = -1;
  if (auto it = metrics_.save_ordered_at.find(id); it != metrics_.save_ordered_at.end()) {
    secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - it->second).count();
  }
  if (!finalize) {
    (ok ? metrics_.saves_ok : metrics_.saves_failed)++;
    metrics_.last_save_duration = secs;
  }
  Emit(EventLog::Event("save_acknowledged")
           .Set("save_id", id)
           .Set("rank", rank)
           .Set("finalize", finalize)
           .Set("ok", ok)
           .Set("error", error)
           .Set("duration_s", secs));
  coordinator_->ReportSaved(id, rank, finalize, ok, error);
}

void Agent::ArmMonitor() {
  if (config_.hang_timeout.count() <= 0 || !control_) return;
  monitor_timer_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      config_.monitor_interval));
  monitor_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || state_ == State::kFinished) return;
    CheckHangs();
    ArmMonitor();
  });
}

void Agent::CheckHangs() {
  if (state_ != State::kRunning || !group_) return;
  const auto now = std::chrono::steady_clock::now();
  std::vector<int> silent;  // local ranks, the longest silent first
  for (const auto& w : group_->workers()) {
    if (w.local_rank < 0) continue;
    const RankControl& rc = control_->rank(w.local_rank);
    // A rank whose loop is over, or that closed its channel (it is exiting, its stack-dump
    // handler may be gone), is not watched: the signal would kill it.
    if (!rc.progress_seen || rc.finished || !rc.connected || hung_.count(w.local_rank) ||
        !w.process || w.process->exited()) {
      continue;
    }
    if (now - rc.last_progress >= config_.hang_timeout) silent.push_back(w.local_rank);
  }
  if (silent.empty()) return;
  std::sort(silent.begin(), silent.end(), [&](int a, int b) {
    return control_->rank(a).last_progress < control_->rank(b).last_progress;
  });
  std::string ranks;
  for (int lr : silent) {
    const auto& w = group_->workers().at(lr);
    hung_.insert(lr);
    ranks += (ranks.empty() ? "" : ",") + std::to_string(w.rank);
    ::kill(w.process->pid(), StackDumpSignal());
  }
  // A rank stuck in a collective makes its peers wait too: every silent rank is listed and
  // dumps its stacks, and one failure (the longest silent) starts the fault protocol.
  const RankControl& first = control_->rank(silent.front());
  LauncherLog()->warn("rank(s) {} reported no progress for {:g}s after step {}; dumping their stacks "
              "and treating it as a failure",
              ranks, config_.hang_timeout.count(), first.step);
  // Give faulthandler a moment to write the stacks before the stop begins.
  auto timer = std::make_shared<boost::asio::steady_timer>(io_, std::chrono::seconds(1));
  timer->async_wait([this, timer, lr = silent.front(), ranks,
                     round = group_->assignment().round](const boost::system::error_code&) {
    DeclareHung(lr, ranks, round);
  });
}

void Agent::DeclareHung(int local_rank, const std::string& ranks, uint64_t round) {
  if (state_ != State::kRunning || !group_ || group_->assignment().round != round) return;
  const auto& w = group_->workers().at(local_rank);
  const RankControl& rc = control_->rank(local_rank);
  WorkerFailure f;
  f.local_rank = local_rank;
  f.rank = w.rank;
  f.pid = w.process->pid();
  f.exitcode = 124;  // timeout(1)'s code: the process did not exit, it stopped progressing
  f.error_file = "<N/A>";
  f.message = fmt::format("hang: rank(s) {} made no progress for {:g}s after step {} (their "
                          "stacks are in their stderr)",
                          ranks, config_.hang_timeout.count(), rc.step);
  f.timestamp = std::chrono::duration_cast<std::chrono::seconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  f.host = opts_.host.get();
  OnLocalFailure(f);
}

}  // namespace ftrun::launcher
