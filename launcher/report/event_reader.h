// ReadEventLog: an event log (ftrun(1) EVENT LOG) read back into flat records for
// `ftrun report`. It reads what a job writes while it runs, so it tolerates what a live or
// damaged file holds: a last line still being written, lines that are not JSON, lines too long
// to be a record, records of another schema version. Each is skipped and counted, never fatal;
// only a file that cannot be opened is an error.
//
// Bounds, so that a huge or hostile file cannot exhaust memory: lines over kMaxRecordBytes are
// skipped unparsed, at most kMaxEventBytes of the file are read and at most kMaxRecords kept
// (the rest is counted as cut off).
//
// Thread: any; no state.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"

namespace ftrun::launcher::report {

inline constexpr size_t kMaxRecordBytes = 1 << 20;
inline constexpr size_t kMaxEventBytes = size_t{256} << 20;
inline constexpr size_t kMaxRecords = 500000;

// One record: the envelope, then every other member as text (strings as they are, numbers
// without a fraction as integers, lists joined with ",").
struct EventRecord {
  std::string event;
  int64_t time_ms = 0;  // since the epoch (UTC); 0 when the record has no valid "time"
  std::string node;
  std::optional<int64_t> round;
  std::map<std::string, std::string> fields;

  // A member's text, or `fallback`.
  std::string Text(const std::string& key, const std::string& fallback = "") const;
  // A member as an integer, or nullopt when absent or not a number.
  std::optional<int64_t> Int(const std::string& key) const;
};

struct EventLogRead {
  std::vector<EventRecord> records;  // in file order
  size_t lines = 0;
  size_t not_json = 0;             // skipped: not a JSON object (or no "event")
  size_t too_long = 0;             // skipped: over kMaxRecordBytes
  size_t other_schema = 0;         // skipped: "schema" is not kEventLogSchema
  int64_t other_schema_seen = 0;   // one of those versions, for the message
  bool partial_last_line = false;  // the file ends inside a line (a job still writing it)
  bool cut_off = false;            // kMaxEventBytes or kMaxRecords reached
};

// ISO 8601 UTC with milliseconds ("2026-11-26T01:16:18.123Z") to ms since the epoch.
std::optional<int64_t> ParseIsoTimeMs(const std::string& text);

// One line (without its newline) to a record; nullopt when it is not an event-log record.
// `schema` receives the record's schema version when it has one.
std::optional<EventRecord> ParseEventLine(const std::string& line, int64_t* schema);

// Reads the file at `path`; the error names it.
Result<EventLogRead> ReadEventLog(const std::string& path);

}  // namespace ftrun::launcher::report
