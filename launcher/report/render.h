// RenderReportHtml: the post-mortem page of `ftrun report`, one self-contained HTML document
// (inline CSS and SVG, no script, nothing fetched: it opens offline, from a mail attachment
// or a CI artifact). Sections: the job's timeline (attempts, faults, recovery phases,
// checkpoints, node events), one breakdown per recovery on its own scale, the faults, the
// merged stacks of hung ranks, the fault record, and what the log could not tell.
//
// The drawn elements carry classes a reader or a test can find: "attempt", "fault",
// "phase phase-<name>" (detect, save, stop, rendezvous, spawn, first-step), "marker
// marker-<kind>", "breakdown". Pure: text in, text out. Thread: any.
#pragma once

#include <string>

#include "launcher/report/report_inputs.h"
#include "launcher/report/timeline.h"

namespace ftrun::launcher::report {

inline constexpr const char* kFaultColour = "#d62728";

std::string RenderReportHtml(const Timeline& timeline, const ReportInputs& inputs);

// "1.234 s", "56 ms": a duration for people.
std::string FormatDuration(int64_t ms);

}  // namespace ftrun::launcher::report
