#include "launcher/agent/save_relay.h"

#include <fmt/format.h>
#include <signal.h>

#include "common/log.h"

namespace ftrun::launcher {

int SaveRelay::StackDumpSignal() { return SIGRTMIN + 2; }

SaveRelay::SaveRelay(boost::asio::io_context& io, const LaunchConfig& config,
                     Coordinator& coordinator, AgentReport& report, Clock& clock,
                     CurrentGroup group)
    : io_(io),
      config_(config),
      coordinator_(coordinator),
      report_(report),
      clock_(clock),
      group_(std::move(group)) {}

SaveRelay::~SaveRelay() = default;

void SaveRelay::Start(const EnvMap& agent_env) {
  ControlServer::Events ev;
  ev.on_saved = [this](int lr, uint64_t id, bool finalize, bool ok, const std::string& err) {
    OnRankSaved(lr, id, finalize, ok, err);
  };
  ev.on_peer_failed = [](int lr, const std::string& err) {
    LauncherLog()->info("local_rank={} reports a failed collective ({}); it waits for orders", lr,
                        err);
  };
  control_ = std::make_unique<ControlServer>(io_, ev);
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
}

void SaveRelay::Stop() {
  if (control_) control_->Stop();
}

EnvMap SaveRelay::WorkerEnv() const {
  if (!control_) return {};
  return {
      {"FTRUN_CONTROL_SOCKET", control_->path()},
      {"FTRUN_STACK_SIGNAL", std::to_string(StackDumpSignal())},
      {"FTRUN_SAVE_TIMEOUT", fmt::format("{:g}", config_.save_timeout.count())},
  };
}

void SaveRelay::GroupStarted(const WorkerGroup& group) {
  if (!control_) return;
  std::vector<pid_t> pids;
  for (const auto& w : group.workers()) {
    if (w.local_rank >= 0) pids.push_back(w.process->pid());  // auxiliaries have no channel
  }
  control_->SetWorkers(pids, group.assignment().base_rank, group.assignment().restart_count);
}

bool SaveRelay::LocalRanksCanSave() const {
  const WorkerGroup* group = group_();
  if (!control_ || !config_.fault_save || !group) return false;
  for (const auto& w : group->workers()) {
    if (w.local_rank < 0) continue;
    const RankControl& rc = control_->rank(w.local_rank);
    if (w.process && !w.process->exited() && rc.connected && rc.has_handler) return true;
  }
  return false;
}

void SaveRelay::ReportProgress(uint64_t round, const rendezvous::SaveOrder& order) {
  const WorkerGroup* group = group_();
  std::vector<rendezvous::RankProgress> ranks;
  if (group && group->assignment().round == round && control_) {
    for (const auto& w : group->workers()) {
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
  report_.Emit(EventLog::Event("save_progress_reported")
                   .Set("save_id", order.id)
                   .Set("ranks", static_cast<int>(ranks.size())));
  coordinator_.ReportProgress(order.id, ranks);
}

void SaveRelay::SendOrFail(int rank, int base, const JsonMessage& m, uint64_t id, bool finalize,
                           const std::string& why) {
  if (!control_ || !control_->Send(rank - base, m.str())) {
    coordinator_.ReportSaved(id, rank, finalize, false, why);
  }
}

void SaveRelay::OnSaveOrder(uint64_t round, const rendezvous::SaveOrder& order) {
  if (order.collecting) return ReportProgress(round, order);
  const WorkerGroup* group = group_();
  if (!group || group->assignment().round != round) return;
  const int base = group->assignment().base_rank;
  const int nproc = static_cast<int>(group->rank_count());
  auto local = [&](int rank) { return rank - base >= 0 && rank - base < nproc; };
  const std::string tag = fmt::format("{}-{}", round, order.id);
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
        .Set("tag", tag);
    SendOrFail(order.finalizer, base, m, order.id, true, "rank not connected");
    return;
  }
  for (const auto& s : order.savers) {
    if (!local(s.rank)) continue;
    LauncherLog()->info("fault-time save {}: asking rank {} (group '{}') to save step {}", order.id,
                        s.rank, s.group, order.step);
    ordered_at_[order.id] = clock_.Now();
    report_.Emit(EventLog::Event("save_requested")
                     .Set("save_id", order.id)
                     .Set("rank", s.rank)
                     .Set("group", s.group)
                     .Set("step", order.step));
    JsonMessage m("save");
    m.Set("id", static_cast<int64_t>(order.id))
        .Set("step", order.step)
        .Set("group", s.group)
        .Set("finalize", order.savers.size() == 1)
        .Set("tag", tag);
    SendOrFail(s.rank, base, m, order.id, false,
               "rank " + std::to_string(s.rank) + " is not connected");
  }
}

void SaveRelay::OnRankSaved(int local_rank, uint64_t id, bool finalize, bool ok,
                            const std::string& error) {
  const WorkerGroup* group = group_();
  if (!group) return;
  const int rank = group->assignment().base_rank + local_rank;
  if (ok) {
    LauncherLog()->info("fault-time save {}: rank {} {}", id, rank,
                        finalize ? "completed it" : "saved");
  } else {
    LauncherLog()->warn("fault-time save {}: rank {} failed: {}", id, rank, error);
  }
  double secs = -1;
  if (auto it = ordered_at_.find(id); it != ordered_at_.end()) {
    secs = std::chrono::duration<double>(clock_.Now() - it->second).count();
  }
  if (!finalize) {
    SaveMetrics& m = report_.saves();
    (ok ? m.ok : m.failed)++;
    m.last_duration = secs;
  }
  report_.Emit(EventLog::Event("save_acknowledged")
                   .Set("save_id", id)
                   .Set("rank", rank)
                   .Set("finalize", finalize)
                   .Set("ok", ok)
                   .Set("error", error)
                   .Set("duration_s", secs));
  coordinator_.ReportSaved(id, rank, finalize, ok, error);
}

}  // namespace ftrun::launcher
