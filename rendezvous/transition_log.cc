#include "rendezvous/transition_log.h"

#include <fmt/format.h>

#include <algorithm>
#include <variant>

#include "common/log.h"
#include "rendezvous/credentials.h"
#include "rendezvous/network_check_plan.h"

namespace ftrun::rendezvous {
namespace {

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

}  // namespace

void TransitionLog::Log(RendezvousState& state) {
  const Phase phase = state.phase();
  const uint64_t round = state.round();
  NodeView v = state.View("");
  auto write = [this](JsonMessage m, std::optional<uint64_t> r = std::nullopt) {
    if (event_log_) event_log_->Write(std::move(m), r);
  };
  auto log_event = Overloaded{
      [&](const RoundFormed& e) {
        RendezvousLog()->info(
            "round {} round={} nodes={} restart_count={} world_size={} restore=\"{}\"",
            e.rebuilt ? "rebuilt from the rejoining nodes" : "formed", round, e.members.size(),
            v.restart_count, state.world_size(), e.restore);
        if (std::any_of(e.switch_paths.begin(), e.switch_paths.end(),
                        [](const auto& p) { return !p.empty(); })) {
          std::string order;  // group rank order, by switch path
          for (size_t i = 0; i < e.members.size() && i < 64; ++i) {
            order += (i ? " " : "") + std::to_string(i) + ":" +
                     (e.switch_paths[i].empty() ? "-" : e.switch_paths[i]);
          }
          RendezvousLog()->info("round order round={} by_switch=\"{}{}\"", round, order,
                                e.members.size() > 64 ? " ..." : "");
        }
        auto m = EventLog::Event("round_formed")
                     .Set("members", e.members)
                     .Set("switch_paths", e.switch_paths)
                     .Set("restart_count", v.restart_count)
                     .Set("world_size", state.world_size());
        if (e.rebuilt) m.Set("rebuilt", true);
        m.Set("restore", e.restore);
        write(std::move(m), round);
      },
      [&](const Partition& e) {
        RendezvousLog()->warn(
            "partition detected: node {} cannot reach node {} (group rank {}'s store {}); the "
            "round stops without spending a restart and the next one waits {:g}s",
            Printable(e.from, 256), Printable(e.to, 256), e.to_rank, Printable(e.error, 512),
            e.wait.count());
        write(EventLog::Event("partition")
                  .Set("from", e.from)
                  .Set("to", e.to)
                  .Set("to_rank", e.to_rank)
                  .Set("error", e.error)
                  .Set("wait_s", e.wait.count()),
              round);
      },
      [&](const RebuildGivenUp& e) {
        RendezvousLog()->warn("round {} not rebuilt: {}; forming the next round", e.round,
                              Printable(e.why, 1024));
        write(EventLog::Event("round_rebuild_given_up").Set("round", e.round).Set("why", e.why),
              round);
      },
      [&](const RestartGivenBack& e) {
        RendezvousLog()->info(
            "node {} lost while the round stopped for worker failures: they followed from it, "
            "no restart spent restart_count={}",
            Printable(e.host), e.restart_count);
        write(EventLog::Event("restart_given_back")
                  .Set("host", e.host)
                  .Set("restart_count", e.restart_count),
              round);
      },
      [&](const NetworkCheckStarted& e) {
        RendezvousLog()->info("network check round={} nodes={}", round, e.members.size());
        write(EventLog::Event("network_check_started").Set("members", e.members), round);
      },
      [&](const NetworkCheckFinished& e) {
        RendezvousLog()->info("network check finished round={}: {}", round,
                              Printable(e.summary, 1024));
        for (const auto& line : RenderTable(e.report)) {
          RendezvousLog()->info("  {}", Printable(line, 4096));
        }
        write(ToJson(e.report), round);
      },
      [&](const NodeEvent& e) {
        const char* name = NodeEventName(e.kind);
        RendezvousLog()->info("{} node={} host={} nodes={}{}", name, Printable(e.node, 256),
                              Printable(e.host, 256), state.node_count(),
                              e.why.empty() ? "" : " why=" + Printable(e.why, 1024));
        auto m = EventLog::Event(name).Set("member", e.node).Set("host", e.host);
        if (!e.why.empty()) m.Set("why", e.why);
        write(std::move(m));
      },
  };
  for (const StateEvent& e : state.TakeEvents()) std::visit(log_event, e);
  if (phase == Phase::kSaving && v.save) {
    // Each stage of the fault-time save, with the time since the fault.
    const auto& o = *v.save;
    std::string key = fmt::format("{}/{}/{}", o.id, o.collecting, o.finalize);
    if (key != logged_save_) {
      logged_save_ = key;
      if (o.collecting) save_started_ = Clock::now();
      const double ms =
          std::chrono::duration<double, std::milli>(Clock::now() - save_started_).count();
      if (o.collecting) {
        RendezvousLog()->info("fault-time save {}: collecting the ranks' progress", o.id);
      } else if (o.finalize) {
        RendezvousLog()->info(
            "fault-time save {}: every group saved step {}; rank {} completes it "
            "(+{:.1f} ms)",
            o.id, o.step, o.finalizer, ms);
      } else {
        std::string savers;
        for (const auto& sv : o.savers) {
          savers += (savers.empty() ? "" : ",") + std::to_string(sv.rank);
        }
        RendezvousLog()->info("fault-time save {}: step {} by rank(s) {} (+{:.1f} ms)", o.id,
                              o.step, savers, ms);
      }
    }
  }
  if (phase == logged_phase_ && round == logged_round_) return;
  logged_phase_ = phase;
  logged_round_ = round;
  switch (phase) {
    case Phase::kForming:
      RendezvousLog()->info("forming round={} nodes={}", round, state.node_count());
      break;
    case Phase::kRunning:
    case Phase::kChecking:
      break;  // logged from the round_formed and network_check events
    case Phase::kStopping:
      RendezvousLog()->info("round stopping round={} reason=\"{}\"", round,
                            Printable(v.reason, 1024));
      write(EventLog::Event("round_stopping").Set("reason", v.reason), round);
      break;
    case Phase::kSaving:
      RendezvousLog()->info("round saving before it stops round={} reason=\"{}\"", round,
                            Printable(v.reason, 1024));
      write(EventLog::Event("round_saving").Set("reason", v.reason), round);
      break;
    case Phase::kSucceeded:
    case Phase::kFailed:
      RendezvousLog()->info("job finished outcome={} reason=\"{}\"", PhaseName(phase),
                            Printable(v.reason, 1024));
      write(EventLog::Event("job_finished")
                .Set("outcome", std::string(PhaseName(phase)))
                .Set("reason", v.reason),
            round);
      break;
  }
}

}  // namespace ftrun::rendezvous
