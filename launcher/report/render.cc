#include "launcher/report/render.h"

#include <fmt/format.h>

#include <algorithm>
#include <ctime>

#include "common/markup.h"

namespace ftrun::launcher::report {
namespace {

constexpr int kWidth = 1100;  // the timeline's drawing
constexpr int kLeft = 110;    // row labels
constexpr int kRight = 20;
constexpr int kPlot = kWidth - kLeft - kRight;

struct PhaseStyle {
  const char* name;
  const char* css;
  const char* colour;
};
constexpr PhaseStyle kPhases[] = {
    {"detect", "detect", "#f28e2b"}, {"save", "save", "#edc948"},
    {"stop", "stop", "#b07aa1"},     {"rendezvous", "rendezvous", "#76b7b2"},
    {"spawn", "spawn", "#59a14f"},   {"first step", "first-step", "#9c755f"},
};

std::string Base64(const std::string& in) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    out += {k[v >> 18], k[(v >> 12) & 63], k[(v >> 6) & 63], k[v & 63]};
  }
  if (i + 1 == in.size()) {
    const uint32_t v = uint8_t(in[i]) << 16;
    out += {k[v >> 18], k[(v >> 12) & 63], '=', '='};
  } else if (i + 2 == in.size()) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += {k[v >> 18], k[(v >> 12) & 63], k[(v >> 6) & 63], '='};
  }
  return out;
}

std::string Utc(int64_t ms) {
  const time_t secs = static_cast<time_t>(ms / 1000);
  std::tm tm{};
  ::gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return fmt::format("{}.{:03d} UTC", buf, static_cast<int>(ms % 1000));
}

// The time axis of the whole job.
struct Scale {
  int64_t start, span;
  double X(int64_t ms) const {
    return kLeft + kPlot * static_cast<double>(std::clamp<int64_t>(ms - start, 0, span)) /
                       static_cast<double>(span);
  }
};

void Axis(const Scale& s, int y, std::string& svg) {
  const double secs = static_cast<double>(s.span) / 1000.0;
  double step = 1;
  for (double c : {1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
                   7200.0, 21600.0, 86400.0}) {
    step = c;
    if (secs / c <= 12) break;
  }
  for (double t = 0; t <= secs + 1e-9; t += step) {
    const double x = s.X(s.start + static_cast<int64_t>(t * 1000));
    svg += fmt::format(
        "<line x1='{0:.1f}' x2='{0:.1f}' y1='{1}' y2='{2}' stroke='#ddd'/>"
        "<text x='{0:.1f}' y='{3}' class='tick'>{4:g} s</text>\n",
        x, y, y + 200, y - 4, t);
  }
}

std::string RowLabel(int y, const std::string& text) {
  return fmt::format("<text x='6' y='{}' class='row'>{}</text>\n", y, EscapeMarkup(text));
}

std::string TimelineSvg(const Timeline& t) {
  const Scale s{t.start_ms, std::max<int64_t>(1, t.end_ms - t.start_ms)};
  std::string svg = fmt::format(
      "<svg id='timeline' xmlns='http://www.w3.org/2000/svg' width='{}' height='250' "
      "viewBox='0 0 {} 250' role='img' aria-label='timeline of the job'>\n",
      kWidth, kWidth);
  Axis(s, 24, svg);
  svg += RowLabel(48, "attempts") + RowLabel(98, "faults") + RowLabel(138, "recovery") +
         RowLabel(188, "checkpoints") + RowLabel(228, "nodes, rounds");
  for (const auto& a : t.attempts) {
    const double x0 = s.X(a.start_ms), x1 = std::max(s.X(a.end_ms), x0 + 2);
    svg += fmt::format(
        "<rect class='attempt' x='{:.1f}' y='32' width='{:.1f}' height='26' rx='3' "
        "fill='#4e79a7'{}><title>attempt {} (round {}), {} .. {}{}</title></rect>\n",
        x0, x1 - x0,
        a.ended_by_fault ? fmt::format(" stroke='{}' stroke-width='2'", kFaultColour) : "",
        a.restart_count, a.round ? std::to_string(*a.round) : "?", Utc(a.start_ms), Utc(a.end_ms),
        a.running ? " (running)" : "");
    if (x1 - x0 > 70) {
      svg += fmt::format("<text x='{:.1f}' y='50' class='inbar'>attempt {}</text>\n", x0 + 5,
                         a.restart_count);
    }
  }
  for (const auto& f : t.faults) {
    const double x = s.X(f.time_ms);
    const std::string what =
        fmt::format("{}{}{}", f.rank ? "rank " + std::to_string(*f.rank) : std::string("a worker"),
                    " " + f.exit, f.step ? fmt::format(", after step {}", *f.step) : "");
    svg += fmt::format(
        "<g class='fault'><rect class='fault-line' x='{0:.1f}' y='30' width='3' height='190' "
        "fill='{1}'/><rect class='fault-mark' x='{2:.1f}' y='86' width='14' height='14' "
        "fill='{1}'/><text x='{3:.1f}' y='116' class='fault-text'>{4}</text>"
        "<title>{5}: {4} on {6}</title></g>\n",
        x - 1.5, kFaultColour, x - 7, std::min(x + 9, kWidth - 200.0), EscapeMarkup(what),
        Utc(f.time_ms), EscapeMarkup(f.host.empty() ? f.node : f.host));
  }
  for (const auto& r : t.recoveries) {
    for (size_t i = 0; i < r.phases.size() && i < std::size(kPhases); ++i) {
      const Phase& p = r.phases[i];
      if (!p.known) continue;
      const double x0 = s.X(p.start_ms);
      const double w = std::max(s.X(p.end_ms) - x0, 3.0);  // a 5 ms phase still shows
      svg += fmt::format(
          "<rect class='phase phase-{}' x='{:.1f}' y='126' width='{:.1f}' height='22' "
          "fill='{}'><title>{}: {}</title></rect>\n",
          kPhases[i].css, x0, w, kPhases[i].colour, kPhases[i].name,
          FormatDuration(p.end_ms - p.start_ms));
    }
  }
  for (const auto& m : t.markers) {
    const double x = s.X(m.time_ms);
    const bool ckpt = m.kind == "checkpoint" || m.kind == "restore";
    const int y = ckpt ? 182 : 222;
    const char* colour = m.kind == "checkpoint"                       ? "#59a14f"
                         : m.kind == "restore"                        ? "#4e79a7"
                         : m.kind == "round"                          ? "#888"
                         : m.kind == "promoted" || m.kind == "joined" ? "#59a14f"
                                                                      : "#e15759";
    svg += fmt::format(
        "<path class='marker marker-{}' d='M{:.1f} {} l6 6 l-6 6 l-6 -6 z' fill='{}'>"
        "<title>{}: {}</title></path>\n",
        EscapeMarkup(m.kind), x, y - 6, colour, Utc(m.time_ms), EscapeMarkup(m.label));
  }
  svg += "</svg>\n";
  return svg;
}

// One row per phase on the recovery's own scale, so that a 20 ms stop beside a 9 s first
// step is still seen, with its duration written beside it.
std::string BreakdownSvg(const Recovery& r) {
  int64_t start = r.start_ms, end = r.start_ms;
  for (const auto& p : r.phases) {
    if (p.known) end = std::max(end, p.end_ms);
  }
  const double span = static_cast<double>(std::max<int64_t>(1, end - start));
  constexpr int kRow = 20;
  const int height = static_cast<int>(std::size(kPhases)) * kRow + 24;
  std::string svg = fmt::format(
      "<svg class='breakdown' xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' "
      "viewBox='0 0 {} {}' role='img' aria-label='recovery breakdown'>\n",
      kWidth, height, kWidth, height);
  const int plot = kPlot - 90;  // room for the duration after the longest bar
  for (size_t i = 0; i < r.phases.size() && i < std::size(kPhases); ++i) {
    const Phase& p = r.phases[i];
    const int y = 4 + static_cast<int>(i) * kRow;
    svg += fmt::format("<text x='6' y='{}' class='row'>{}</text>", y + 13, kPhases[i].name);
    if (!p.known) {
      svg += fmt::format("<text x='{}' y='{}' class='tick'>unknown</text>\n", kLeft, y + 13);
      continue;
    }
    const double x0 = kLeft + plot * static_cast<double>(p.start_ms - start) / span;
    const double w = std::max(plot * static_cast<double>(p.end_ms - p.start_ms) / span, 3.0);
    svg += fmt::format(
        "<rect class='phase phase-{}' x='{:.1f}' y='{}' width='{:.1f}' height='{}' "
        "fill='{}'><title>{}: {}</title></rect><text x='{:.1f}' y='{}' class='tick'>{}</text>\n",
        kPhases[i].css, x0, y, w, kRow - 4, kPhases[i].colour, kPhases[i].name,
        FormatDuration(p.end_ms - p.start_ms), x0 + w + 5, y + 13,
        FormatDuration(p.end_ms - p.start_ms));
  }
  svg += fmt::format(
      "<text x='{}' y='{}' class='tick'>0</text><text x='{}' y='{}' class='tick' "
      "text-anchor='end'>{} in all</text>\n</svg>\n",
      kLeft, height - 4, kLeft + plot, height - 4, FormatDuration(end - start));
  return svg;
}

std::string RecoverySection(const Recovery& r, size_t n) {
  std::string h = fmt::format("<h3>Recovery {}: from attempt {} ({})</h3>\n", n + 1, r.from_attempt,
                              EscapeMarkup(r.cause));
  h += BreakdownSvg(r);
  h += "<table class='phases'><tr>";
  for (size_t i = 0; i < std::size(kPhases); ++i) {
    h += fmt::format("<th><span class='swatch' style='background:{}'></span>{}</th>",
                     kPhases[i].colour, kPhases[i].name);
  }
  h += "<th>steps lost</th></tr><tr>";
  for (const auto& p : r.phases) {
    h += "<td>" + (p.known ? FormatDuration(p.end_ms - p.start_ms) : std::string("unknown")) +
         "</td>";
  }
  std::string lost = "unknown";
  if (r.steps_lost) {
    lost = fmt::format("{} (last completed step {}, resumed at {})", *r.steps_lost, *r.fault_step,
                       *r.resume_step);
  } else if (r.fault_step) {
    lost = fmt::format("unknown (last completed step {})", *r.fault_step);
  }
  h += "<td>" + EscapeMarkup(lost) + "</td></tr></table>\n";
  return h;
}

const char* kStyle = R"(<style>
body{font:14px/1.4 sans-serif;margin:20px;color:#222;max-width:1140px}
h1{font-size:20px}h2{font-size:17px;margin-top:28px}h3{font-size:15px}
.tick{font-size:11px;fill:#666}.row{font-size:12px;fill:#333}.inbar{font-size:12px;fill:#fff}
.fault-text{font-size:12px;fill:#d62728}
table{border-collapse:collapse;margin:6px 0}td,th{border:1px solid #ccc;padding:3px 8px;
text-align:left;font-size:13px}.swatch{display:inline-block;width:10px;height:10px;
margin-right:5px}pre{background:#f6f6f6;padding:8px;overflow:auto;max-height:480px;font-size:12px}
.missing{background:#fff4e0;border:1px solid #f0c080;padding:6px 10px}
.summary td{border:none;padding:1px 10px 1px 0}
</style>)";

}  // namespace

std::string FormatDuration(int64_t ms) {
  if (ms < 1000) return fmt::format("{} ms", ms);
  if (ms < 120000) return fmt::format("{:.3g} s", static_cast<double>(ms) / 1000.0);
  return fmt::format("{} min {} s", ms / 60000, (ms % 60000) / 1000);
}

std::string RenderReportHtml(const Timeline& t, const ReportInputs& in) {
  std::string h =
      "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>\n<title>ftrun "
      "report " +
      EscapeMarkup(t.run_id) + "</title>\n" + kStyle + "</head><body>\n";
  h += "<h1>ftrun report: run " + EscapeMarkup(t.run_id.empty() ? "?" : t.run_id) + "</h1>\n";
  h += "<table class='summary'>";
  auto row = [&h](const std::string& k, const std::string& v) {
    h += "<tr><td>" + EscapeMarkup(k) + "</td><td>" + EscapeMarkup(v) + "</td></tr>";
  };
  row("outcome",
      t.outcome.empty()
          ? "not logged (still running?)"
          : t.outcome + (t.outcome_reason.empty() ? std::string() : " (" + t.outcome_reason + ")"));
  if (t.end_ms > 0) {
    row("time", Utc(t.start_ms) + " .. " + Utc(t.end_ms) + " (" +
                    FormatDuration(t.end_ms - t.start_ms) + ")");
  }
  row("attempts", std::to_string(t.attempts.size()));
  row("faults", std::to_string(t.faults.size()));
  row("seen from node", t.primary_node);
  if (!t.version.empty()) row("ftrun", t.version);
  row("read", in.event_log_path.empty() ? "no event log" : in.event_log_path);
  h += "</table>\n";

  std::vector<std::string> missing = t.missing;
  if (in.event_log_path.empty()) {
    missing.insert(missing.begin(),
                   "no event log (events.jsonl) in " + in.run_dir +
                       ": the timeline cannot be drawn; the job ran with --log-dir /dev/null "
                       "or an --event-log elsewhere (pass that file to ftrun report)");
  }
  if (in.events) {
    const EventLogRead& e = *in.events;
    if (e.other_schema > 0) {
      missing.push_back(
          fmt::format("{} records of event-log schema {} skipped (this ftrun reads "
                      "schema 1)",
                      e.other_schema, e.other_schema_seen));
    }
    if (e.not_json > 0)
      missing.push_back(fmt::format("{} lines that are not records skipped", e.not_json));
    if (e.too_long > 0) missing.push_back(fmt::format("{} lines over 1 MiB skipped", e.too_long));
    if (e.partial_last_line) missing.push_back("the last line is incomplete (being written)");
    if (e.cut_off)
      missing.push_back("the event log is over the reader's bound: its end is not read");
  }
  for (const auto& n : in.notes) missing.push_back(n);
  if (!missing.empty()) {
    h += "<div class='missing'><b>Not in this page:</b><ul>";
    for (const auto& m : missing) h += "<li>" + EscapeMarkup(m) + "</li>";
    h += "</ul></div>\n";
  }

  if (t.end_ms > 0) {
    h += "<h2>Timeline</h2>\n" + TimelineSvg(t);
    h += "<p>";
    for (const auto& p : kPhases) {
      h += fmt::format("<span class='swatch' style='background:{}'></span>{} &nbsp; ", p.colour,
                       p.name);
    }
    h += fmt::format("<span class='swatch' style='background:{}'></span>fault</p>\n", kFaultColour);
  }
  if (!t.recoveries.empty()) {
    h += "<h2>Recoveries</h2>\n<p>From the fault to the first training step completed after "
         "the restart: <b>detect</b> (the fault until this node knew; a hang's silence), "
         "<b>save</b> (the fault-time save, or the stop order's way), <b>stop</b> (the workers' "
         "exit), <b>rendezvous</b> (the next round), <b>spawn</b> (the new workers' start), "
         "<b>first step</b> (the script's own start-up, imports, process group, checkpoint load, "
         "and its first step).</p>\n";
    for (size_t i = 0; i < t.recoveries.size(); ++i) h += RecoverySection(t.recoveries[i], i);
  }
  if (!t.faults.empty()) {
    h += "<h2>Faults</h2>\n<table><tr><th>time</th><th>node</th><th>rank</th><th>how</th>"
         "<th>last completed step</th><th>message</th></tr>\n";
    for (const auto& f : t.faults) {
      h += "<tr><td>" + Utc(f.time_ms) + "</td><td>" +
           EscapeMarkup(f.host.empty() ? f.node : f.host) + "</td><td>" +
           (f.rank ? std::to_string(*f.rank) : "-") + "</td><td>" + EscapeMarkup(f.exit) +
           "</td><td>" + (f.step ? std::to_string(*f.step) : "unknown") + "</td><td>" +
           EscapeMarkup(f.message.substr(0, 300)) + "</td></tr>\n";
    }
    h += "</table>\n";
  }
  if (!t.markers.empty()) {
    h += "<h2>Checkpoints, rounds and nodes</h2>\n<table><tr><th>time</th><th>what</th></tr>\n";
    for (const auto& m : t.markers) {
      h += "<tr><td>" + Utc(m.time_ms) + "</td><td>" + EscapeMarkup(m.label) + "</td></tr>\n";
    }
    h += "</table>\n";
  }
  if (!in.stacks_text.empty() || !in.stacks_svg.empty()) {
    h += "<h2>Merged stacks of hung ranks</h2>\n";
    for (const auto& s : in.stacks_svg) {
      // As an image: the SVG's own scripts, if any, do not run.
      h += "<h3>" + EscapeMarkup(s.name) + "</h3>\n<img class='stacks' alt='" +
           EscapeMarkup(s.name) + "' style='max-width:100%' src='data:image/svg+xml;base64," +
           Base64(s.text) + "'>\n";
    }
    for (const auto& s : in.stacks_text) {
      h += "<h3>" + EscapeMarkup(s.name) + "</h3>\n<pre>" + EscapeMarkup(s.text) + "</pre>\n";
    }
  }
  h += "<h2>Fault record</h2>\n";
  h += in.fault_record ? "<pre class='fault-record'>" + EscapeMarkup(*in.fault_record) + "</pre>\n"
                       : std::string(
                             "<p>No fault_record.json (the agent writes it when the job "
                             "ends in failure).</p>\n");
  h += "<p class='tick'>Written by ftrun report from the files of the job's log directory.</p>\n"
       "</body></html>\n";
  return h;
}

}  // namespace ftrun::launcher::report
