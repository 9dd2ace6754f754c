#include "launcher/agent/stack_dumps.h"

#include <fmt/format.h>

#include "common/log.h"
#include "launcher/diagnostics/stacks.h"
#include "launcher/diagnostics/stacks_report.h"

namespace ftrun::launcher {

StackDumps::StackDumps(boost::asio::io_context& io, Clock& clock, const WorkerChannels& channels,
                       Coordinator& coordinator, std::string stacks_dir,
                       std::shared_future<std::string> host, CurrentGroup current)
    : io_(io),
      clock_(clock),
      channels_(channels),
      coordinator_(coordinator),
      stacks_dir_(std::move(stacks_dir)),
      host_(std::move(host)),
      current_(std::move(current)) {}

StackCollector* StackDumps::Collector() {
  if (!collector_ && !channels_.stack_dump_dir().empty()) {
    StackCollectorOptions o;
    o.dump_dir = channels_.stack_dump_dir();
    o.signal = WorkerChannels::StackDumpSignal();
    o.deadline = kLocalDeadline;
    o.eu_stack = StackCollector::FindEuStack(CurrentEnvironment());
    o.host = host_.valid() ? host_.get() : "";
    collector_ = std::make_unique<StackCollector>(io_, clock_, std::move(o));
  }
  return collector_.get();
}

std::vector<StackTarget> StackDumps::Targets() const {
  std::vector<StackTarget> out;
  const WorkerGroup* group = current_();
  if (!group) return out;
  for (const auto& w : group->workers()) {
    if (w.local_rank < 0 || !w.process || w.process->exited()) continue;
    // A rank whose helper said hello has registered the handler first (control.py).
    const ControlServer* channel = channels_.control();
    const bool helper = channel && channel->rank(w.local_rank).connected;
    out.push_back({w.rank, w.process->pid(), w.process.get(), helper});
  }
  return out;
}

void StackDumps::Collect(std::function<void(std::vector<RankDump>)> done) {
  StackCollector* c = Collector();
  auto targets = Targets();
  if (!c || targets.empty()) {
    std::vector<RankDump> none;
    for (const auto& t : targets) {
      RankDump d;
      d.rank = t.rank;
      d.pid = t.pid;
      d.note = "no worker control channel on its node";
      none.push_back(d);
    }
    return done(std::move(none));
  }
  c->Collect(std::move(targets), std::move(done));
}

void StackDumps::OnOrder(uint64_t stacks_id) {
  LauncherLog()->info("stack dump ordered id={}: collecting this node's ranks", stacks_id);
  Collect([this, stacks_id, alive = std::weak_ptr<bool>(alive_)](std::vector<RankDump> dumps) {
    if (alive.lock()) coordinator_.ReportStacks(stacks_id, std::move(dumps));
  });
}

void StackDumps::ForHang(uint64_t round, std::function<void(const HangStacks&)> done) {
  auto alive = std::weak_ptr<bool>(alive_);
  coordinator_.GatherJobStacks(
      std::chrono::duration<double>(kJobDeadline),
      [this, alive, round, done](bool job_wide, const rendezvous::RpcOutcome& out,
                                 const rendezvous::StacksCollection& got) {
        if (!alive.lock()) return;
        if (job_wide && out.ok() && !got.stacks.empty()) {
          std::string note;
          if (!got.missing.empty()) {
            note = "no answer from " + fmt::format("{}", fmt::join(got.missing, ", "));
          }
          if (got.left_out > 0) {
            note += (note.empty() ? "" : "; ") +
                    fmt::format("{} rank(s) left out (size bound)", got.left_out);
          }
          return Write(round, got.stacks, note, done);
        }
        if (job_wide) {
          LauncherLog()->warn("job-wide stacks unavailable ({}); this node's only",
                              out.ok() ? "no node answered" : out.message);
        }
        Collect([this, alive, round, done](std::vector<RankDump> dumps) {
          if (alive.lock()) Write(round, std::move(dumps), "", done);
        });
      });
}

void StackDumps::Write(uint64_t round, std::vector<RankDump> dumps, const std::string& note,
                       std::function<void(const HangStacks&)> done) {
  std::vector<int> ranks;
  for (const auto& d : dumps) ranks.push_back(d.rank);
  const std::string title =
      fmt::format("ftrun merged stacks: hang in round {}, rank(s) {}{}", round, FoldRanks(ranks),
                  note.empty() ? "" : " (" + note + ")");
  bool native = false;
  for (const auto& d : dumps) native |= !d.native.empty();
  const std::string native_note =
      native ? "" : (Collector() ? Collector()->NativeNote() : "no control channel");
  StacksReport report = MakeStacksReport(dumps, title, native_note);
  HangStacks stacks{report.merged.Summary(), report.merged.DifferingRanks()};
  if (auto s = WriteStacksReport(stacks_dir_, StacksReportBase("hang", round), report); !s) {
    LauncherLog()->warn("merged stacks not written: {}", s.error().message);
  } else {
    LauncherLog()->warn("merged stacks: {} (report: {}, flame graph: {})", stacks.summary,
                        report.text_path, report.svg_path);
  }
  done(stacks);
}

}  // namespace ftrun::launcher
