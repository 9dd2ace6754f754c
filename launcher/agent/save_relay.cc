#include "launcher/agent/save_relay.h"

#include <fmt/format.h>

#include "common/log.h"

namespace ftrun::launcher {

SaveRelay::SaveRelay(const LaunchConfig& config, WorkerChannels& channels, Coordinator& coordinator,
                     AgentEvents& events, AgentMetrics& metrics, Clock& clock, CurrentGroup group)
    : config_(config),
      channels_(channels),
      coordinator_(coordinator),
      events_(events),
      metrics_(metrics),
      clock_(clock),
      group_(std::move(group)) {}

bool SaveRelay::LocalRanksCanSave() const {
  const WorkerGroup* group = group_();
  const ControlServer* control = channels_.control();
  if (!control || !config_.fault_save || !group) return false;
  for (const auto& w : group->workers()) {
    if (w.local_rank < 0) continue;
    const RankControl& rc = control->rank(w.local_rank);
    if (w.process && !w.process->exited() && rc.connected && rc.has_handler) return true;
  }
  return false;
}

void SaveRelay::ReportProgress(uint64_t round, const rendezvous::SaveOrder& order) {
  const WorkerGroup* group = group_();
  const ControlServer* control = channels_.control();
  std::vector<rendezvous::RankProgress> ranks;
  if (group && group->assignment().round == round && control) {
    for (const auto& w : group->workers()) {
      if (w.local_rank < 0) continue;
      const RankControl& rc = control->rank(w.local_rank);
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
  events_.Emit(EventLog::Event("save_progress_reported")
                   .Set("save_id", order.id)
                   .Set("ranks", static_cast<int>(ranks.size())));
  coordinator_.ReportProgress(order.id, ranks);
}

void SaveRelay::SendOrFail(int rank, int base, const JsonMessage& m, uint64_t id, bool finalize,
                           const std::string& why) {
  ControlServer* control = channels_.control();
  if (!control || !control->Send(rank - base, m.str())) {
    coordinator_.ReportSaved(id, rank, finalize, false, why);
    return;
  }
  unanswered_[rank - base].push_back({id, finalize});
}

void SaveRelay::OnRankExited(int local_rank) {
  auto it = unanswered_.find(local_rank);
  if (it == unanswered_.end()) return;
  const std::vector<Unanswered> orders = std::move(it->second);
  unanswered_.erase(it);
  const WorkerGroup* group = group_();
  if (!group) return;
  const int rank = group->assignment().base_rank + local_rank;
  for (const auto& o : orders) {
    LauncherLog()->warn("fault-time save {}: rank {} exited before it answered", o.id, rank);
    coordinator_.ReportSaved(o.id, rank, o.finalize, false, "the rank exited before it answered");
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
    events_.Emit(EventLog::Event("save_requested")
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
  if (auto it = unanswered_.find(local_rank); it != unanswered_.end()) {
    std::erase_if(it->second,
                  [&](const Unanswered& o) { return o.id == id && o.finalize == finalize; });
  }
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
  if (!finalize) metrics_.SaveAcknowledged(ok, secs);
  events_.Emit(EventLog::Event("save_acknowledged")
                   .Set("save_id", id)
                   .Set("rank", rank)
                   .Set("finalize", finalize)
                   .Set("ok", ok)
                   .Set("error", error)
                   .Set("duration_s", secs));
  coordinator_.ReportSaved(id, rank, finalize, ok, error);
}

}  // namespace ftrun::launcher
