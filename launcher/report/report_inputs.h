// What `ftrun report` reads, found from the path it is given: a run's log directory (torchrun's
// <log_dir>/<run_id>_XXXXXXXX, msrun's --log_dir) holding events.jsonl and fault_record.json;
// a directory of such runs (the newest is taken, and the page says so); or an event-log file
// (--event-log FILE). Beside them: the merged stacks of hung jobs, stacks/hang-*.txt and
// stacks/hang-*.svg. Only files the job itself writes are read, so a running job works too.
//
// Every file is read with a bound (event_reader.h's, kMaxSideFileBytes for the others); a
// file over it is cut and the page says so. Thread: any; no state.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "launcher/report/event_reader.h"

namespace ftrun::launcher::report {

inline constexpr size_t kMaxSideFileBytes = size_t{4} << 20;
inline constexpr size_t kMaxStackFiles = 16;

struct NamedText {
  std::string name;
  std::string text;
};

struct ReportInputs {
  std::string run_dir;         // where the page goes by default
  std::string event_log_path;  // "" : none found
  std::optional<EventLogRead> events;
  std::optional<std::string> fault_record;  // the JSON text
  std::vector<NamedText> stacks_text;       // hang-*.txt
  std::vector<NamedText> stacks_svg;        // hang-*.svg
  std::vector<std::string> notes;           // what was skipped or chosen, for the page
};

// Finds and reads the job's files. `event_log` (optional) names the event log when it is not
// the run's events.jsonl (the job ran with --event-log FILE). Errors (one sentence naming the
// path): the path does not exist, or holds no file a job writes.
Result<ReportInputs> LoadReportInputs(const std::string& path, const std::string& event_log = "");

// Whether the page is worth writing at the end of a job: the log tells of a fault or a restart.
bool HadFaults(const EventLogRead& log);

}  // namespace ftrun::launcher::report
