// EventLog: --event-log FILE (or FTRUN_EVENT_LOG): one JSON object per line for every
// lifecycle event of an agent or a rendezvous server, appended as it happens (each line one
// write(2) with O_APPEND, so several processes may share a file). Schema version 1, in
// ftrun(1) EVENT LOG: every record has
//   "schema":1, "event":<name>, "time":<ISO 8601 UTC, ms>, "node":<node id>, "run_id":<id>,
//   "round":<round> (when there is one), then the event's own fields.
// Thread: not thread-safe; the loop only. Errors writing are logged once and ignored.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "common/json_message.h"
#include "common/result.h"

namespace ftrun {

inline constexpr int kEventLogSchema = 1;

class EventLog {
 public:
  // A log that writes nothing.
  EventLog() = default;
  // Opens (creates, appends to) `path`; the error names it.
  static Result<std::shared_ptr<EventLog>> Open(const std::string& path, std::string run_id,
                                                std::string node);
  ~EventLog();
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  bool enabled() const { return fd_ >= 0; }
  // A record for `event`; add fields, then Write it.
  static JsonMessage Event(const std::string& event) { return JsonMessage(event, "event"); }
  void Write(JsonMessage record, std::optional<uint64_t> round = std::nullopt);

 private:
  int fd_ = -1;
  std::string run_id_;
  std::string node_;
  bool reported_error_ = false;
};

}  // namespace ftrun
