// `ftrun report LOG_DIR`: the post-mortem page of a job (launcher/report/). Exits 0 when the
// page was written (its path on stdout), 1 when LOG_DIR holds nothing of a job or the page
// cannot be written, 2 on usage errors.
#pragma once

#include <string>
#include <vector>

#include "launcher/cli/parsed.h"

namespace ftrun::launcher {

struct ReportArgs {
  std::string log_dir;    // a run's log directory, a --log-dir of runs, or an event log
  std::string output;     // "" : <run dir>/report.html
  std::string event_log;  // "" : the run's events.jsonl
};

using ParsedReport = Parsed<ReportArgs>;

ParsedReport ParseReportArgs(const std::vector<std::string>& argv);
std::string ReportHelp();

int RunReport(const std::vector<std::string>& argv);

}  // namespace ftrun::launcher
