// WriteReport: `ftrun report`'s work without its command line, also run by the agent at the
// end of a job that had faults: find the job's files, build the timeline, write the page.
// The page goes to `out`, or by default beside the logs: <run dir>/report.html. Written to a
// temporary file and renamed, so a reader never sees half a page.
//
// Thread: any; blocking file I/O, bounded by report_inputs.h's limits (call it off the loop).
#pragma once

#include <string>

#include "common/result.h"

namespace ftrun::launcher::report {

// Returns the path written; errors name the path that failed.
Result<std::string> WriteReport(const std::string& log_dir, const std::string& out,
                                const std::string& event_log = "");

}  // namespace ftrun::launcher::report
