#include "launcher/report/timeline.h"

#include <algorithm>
#include <map>

namespace ftrun::launcher::report {
namespace {

const char* const kPhaseNames[] = {"detect", "save", "stop", "rendezvous", "spawn", "first step"};

// A recovery being followed through its records; each boundary's time once seen.
struct Pending {
  int from_attempt = 0;
  std::string cause;
  std::optional<int64_t> fault_at, detected, stopping, stopped, round_started, spawned, first_step;
  std::optional<int64_t> fault_step, resume_step;
};

std::string ExitText(const EventRecord& r) {
  if (r.Text("kind") == "hang") return "hang (no progress)";
  if (r.Text("kind") == "elsewhere") return "on another node";
  if (auto sig = r.Text("signal"); !sig.empty()) return sig;
  if (auto code = r.Int("exitcode")) {
    if (*code < 0) return "signal " + std::to_string(-*code);
    return "exit code " + std::to_string(*code);
  }
  return "?";
}

std::optional<int64_t> NonNegative(std::optional<int64_t> v) {
  if (v && *v >= 0) return v;
  return std::nullopt;
}

Recovery Finish(const Pending& p) {
  Recovery r;
  r.from_attempt = p.from_attempt;
  r.cause = p.cause;
  r.fault_step = p.fault_step;
  r.resume_step = p.resume_step;
  const std::optional<int64_t> bounds[] = {p.fault_at,      p.detected, p.stopping,  p.stopped,
                                           p.round_started, p.spawned,  p.first_step};
  for (int i = 0; i < 6; ++i) {
    Phase ph;
    ph.name = kPhaseNames[i];
    ph.known = bounds[i] && bounds[i + 1];
    if (ph.known) {
      ph.start_ms = *bounds[i];
      ph.end_ms = std::max(*bounds[i], *bounds[i + 1]);
    } else if (bounds[i]) {
      ph.start_ms = ph.end_ms = *bounds[i];
    }
    r.phases.push_back(ph);
  }
  for (const auto& b : bounds) {
    if (b) {
      r.start_ms = *b;
      break;
    }
  }
  if (p.fault_step && p.resume_step) {
    r.steps_lost = std::max<int64_t>(0, *p.fault_step - *p.resume_step + 1);
  }
  return r;
}

}  // namespace

Timeline BuildTimeline(const std::vector<EventRecord>& input) {
  Timeline t;
  std::vector<EventRecord> records;
  for (const auto& r : input) {
    if (r.time_ms > 0) records.push_back(r);
  }
  if (records.empty()) {
    t.missing.push_back(
        "the event log holds no records: the job has not started yet, or it ran "
        "without an event log");
    return t;
  }
  // Several processes append to one file: their lines may be out of order by a little.
  std::stable_sort(records.begin(), records.end(),
                   [](const auto& a, const auto& b) { return a.time_ms < b.time_ms; });
  t.start_ms = records.front().time_ms;
  t.end_ms = records.back().time_ms;
  t.run_id = records.front().Text("run_id");

  bool has_detected = false;
  for (const auto& r : records) {
    if (r.event == "fault_detected") has_detected = true;
  }
  for (const auto& r : records) {
    if (r.event == "fault_detected" && r.Text("kind") != "elsewhere") {
      t.primary_node = r.node;
      break;
    }
  }
  if (t.primary_node.empty()) {
    for (const auto& r : records) {
      if (r.event == "agent_started") {
        t.primary_node = r.node;
        break;
      }
    }
  }
  if (t.primary_node.empty()) t.primary_node = records.front().node;

  // Faults and markers: every node's. A node's own log may hold only the news of another
  // node's fault ("elsewhere"): then that news is the fault shown.
  bool has_own_fault = false;
  for (const auto& r : records) {
    has_own_fault |= r.event == "fault_detected" && r.Text("kind") != "elsewhere";
  }
  std::map<std::string, int64_t> save_steps;  // save_id -> step
  for (const auto& r : records) {
    const bool fault = has_detected ? r.event == "fault_detected" &&
                                          (!has_own_fault || r.Text("kind") != "elsewhere")
                                    : r.event == "fault_reported";
    if (fault) {
      Fault f;
      f.time_ms = r.time_ms;
      f.node = r.node;
      f.host = r.Text("host");
      f.kind = r.Text("kind", "exit");
      f.rank = r.Int("rank");
      f.exit = ExitText(r);
      f.step = NonNegative(r.Int("step"));
      f.message = r.Text("message", r.Text("why"));
      if (f.message.empty()) {
        // fault_detected leaves the message to the fault_reported record that follows it.
        for (const auto& m : records) {
          if (m.event == "fault_reported" && m.node == r.node && m.time_ms >= r.time_ms &&
              m.Text("rank") == r.Text("rank")) {
            f.message = m.Text("message");
            break;
          }
        }
      }
      t.faults.push_back(f);
    } else if (r.event == "round_formed") {
      t.markers.push_back({r.time_ms, "round",
                           "round " + (r.round ? std::to_string(*r.round) : std::string("?")) +
                               " formed: " + r.Text("members")});
    } else if (r.event == "checkpoint_taken") {
      t.markers.push_back(
          {r.time_ms, "checkpoint", "step " + r.Text("step") + " saved to " + r.Text("where")});
    } else if (r.event == "checkpoint_restored") {
      t.markers.push_back(
          {r.time_ms, "restore", "step " + r.Text("step") + " restored from " + r.Text("where")});
    } else if (r.event == "save_requested") {
      if (auto step = r.Int("step")) save_steps[r.Text("save_id")] = *step;
    } else if (r.event == "save_acknowledged" && r.Text("ok") == "true" &&
               r.Text("finalize") != "true") {
      auto it = save_steps.find(r.Text("save_id"));
      t.markers.push_back(
          {r.time_ms, "checkpoint",
           "fault-time save of step " +
               (it == save_steps.end() ? std::string("?") : std::to_string(it->second)) +
               " by rank " + r.Text("rank")});
    } else if (r.event.rfind("node_", 0) == 0 || r.event == "restart_given_back" ||
               r.event.find("promot") != std::string::npos) {
      std::string kind = r.event.rfind("node_", 0) == 0 ? r.event.substr(5) : r.event;
      if (r.event.find("promot") != std::string::npos) kind = "promoted";
      std::string who = r.Text("host", r.Text("member", r.node));
      std::string why = r.Text("why");
      t.markers.push_back({r.time_ms, kind, r.event + " " + who + (why.empty() ? "" : ": " + why)});
    }
  }

  // Attempts and recoveries: the primary node's own records.
  std::optional<Pending> pending;
  auto close = [&] {
    if (pending) t.recoveries.push_back(Finish(*pending));
    pending.reset();
  };
  auto current = [&]() -> Attempt* { return t.attempts.empty() ? nullptr : &t.attempts.back(); };
  bool saw_first_step = false;
  for (const auto& r : records) {
    if (r.node != t.primary_node) continue;
    const int64_t now = r.time_ms;
    if (r.event == "agent_started" && t.version.empty()) {
      t.version = r.Text("version");
    } else if (r.event == "round_started") {
      if (Attempt* a = current(); a && a->running) {
        a->end_ms = now;
        a->running = false;
      }
      Attempt a;
      a.restart_count = static_cast<int>(r.Int("restart_count").value_or(0));
      a.round = r.round;
      a.start_ms = now;
      a.running = true;
      t.attempts.push_back(a);
      if (pending && pending->stopped && !pending->round_started) pending->round_started = now;
    } else if (r.event == "workers_spawned") {
      if (!current() || !current()->running) {
        Attempt a;
        a.restart_count = static_cast<int>(r.Int("attempt").value_or(0));
        a.round = r.round;
        a.start_ms = now;
        a.running = true;
        t.attempts.push_back(a);
      }
      if (pending && pending->round_started && !pending->spawned) pending->spawned = now;
    } else if (r.event == "first_step") {
      saw_first_step = true;
      if (pending && pending->spawned && !pending->first_step) {
        pending->first_step = now;
        pending->resume_step = NonNegative(r.Int("step"));
        close();
      }
    } else if ((r.event == "fault_detected" || (!has_detected && r.event == "fault_reported")) &&
               !(pending && !pending->stopping)) {
      // A new fault: unless the current one is still before its stop (then it is the same
      // recovery, e.g. a second rank of the group dying with the first).
      if (pending && pending->stopping && !pending->stopped) continue;
      close();
      Pending p;
      p.from_attempt = current() ? current()->restart_count : 0;
      if (r.event == "fault_detected") {
        p.detected = now;
        p.fault_at = now - std::max<int64_t>(0, r.Int("detect_ms").value_or(0));
        p.fault_step = NonNegative(r.Int("step"));
        p.cause = r.Text("kind") == "elsewhere"
                      ? "another node: " + r.Text("why")
                      : "rank " + r.Text("rank", "?") + " (" + ExitText(r) + ")";
      } else {
        p.cause = "rank " + r.Text("rank", "?") + " (" + ExitText(r) + ")";
      }
      pending = p;
    } else if (r.event == "workers_stopping") {
      if (pending && !pending->stopping) pending->stopping = now;
    } else if (r.event == "workers_stopped") {
      if (Attempt* a = current(); a && a->running) {
        a->end_ms = now;
        a->running = false;
        a->ended_by_fault = pending.has_value();
      }
      if (pending && !pending->stopped) pending->stopped = now;
    } else if (r.event == "job_finished" && r.fields.count("exit_code")) {
      t.outcome = r.Text("outcome");
      t.outcome_reason = r.Text("reason");
    }
  }
  if (t.outcome.empty()) {
    // The rendezvous server's verdict, when this node's own is not there (yet).
    for (const auto& r : records) {
      if (r.event == "job_finished") {
        t.outcome = r.Text("outcome");
        t.outcome_reason = r.Text("reason");
      }
    }
  }
  close();
  for (auto& a : t.attempts) {
    if (!a.running) continue;
    a.end_ms = t.end_ms;
    if (!t.outcome.empty()) a.running = false;
  }
  if (!has_detected && !t.faults.empty()) {
    t.missing.push_back(
        "no fault_detected records: the agent that wrote this log predates the recovery "
        "breakdown, so its phases are unknown");
  }
  if (!t.recoveries.empty() && !saw_first_step) {
    t.missing.push_back(
        "first step after a restart: unknown (the workers report no progress; ftrun's helper "
        "ftrun.control or --hang-timeout's progress reports tell it)");
  }
  if (t.outcome.empty()) t.missing.push_back("the job's end is not in the log: it may still run");
  return t;
}

}  // namespace ftrun::launcher::report
