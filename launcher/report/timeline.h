// Timeline: what `ftrun report` draws, built from event-log records alone. Pure: no I/O, no
// clock; unit-tested with hand-made records (tests/unit/launcher/report/timeline_test.cc).
//
// The job's story on one node (the "primary" node: the first that saw a fault of its own, else
// the first agent): its attempts, each fault of any node (who, exit code or signal, step), and
// for each attempt that a fault ended, the recovery split into phases by the agent's records:
//   detect     the fault happened .. fault_detected        (a hang's silence; 0 for a crash)
//   save       fault_detected .. workers_stopping         (fault-time save, or the stop order)
//   stop       workers_stopping .. workers_stopped
//   rendezvous workers_stopped .. the next round_started
//   spawn      round_started .. workers_spawned
//   first step workers_spawned .. first_step              (unknown for a script that reports none)
// A phase whose records are missing is "unknown" (known = false), never guessed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "launcher/report/event_reader.h"

namespace ftrun::launcher::report {

struct Attempt {
  int restart_count = 0;
  std::optional<int64_t> round;
  int64_t start_ms = 0;  // round_started (or workers_spawned)
  int64_t end_ms = 0;    // workers_stopped, the job's end, or the last record (still running)
  bool ended_by_fault = false;
  bool running = false;  // no record ends it yet
};

struct Fault {
  int64_t time_ms = 0;  // when it was detected
  std::string node;
  std::string host;
  // "exit", "hang", "elsewhere" (only in a log without a fault of its own node: the news of
  // another node's, `message` says which) or "exit" (older logs: fault_reported).
  std::string kind;
  std::optional<int64_t> rank;
  std::string exit;  // "exit code 1", "SIGKILL", "hang (exit code 124)"
  std::optional<int64_t> step;
  std::string message;
};

struct Phase {
  std::string name;  // detect, save, stop, rendezvous, spawn, first step
  int64_t start_ms = 0;
  int64_t end_ms = 0;
  bool known = false;
};

struct Recovery {
  int from_attempt = 0;
  int64_t start_ms = 0;                // the first phase's start
  std::vector<Phase> phases;           // always the six, in order
  std::optional<int64_t> fault_step;   // newest step reported when the fault was seen
  std::optional<int64_t> resume_step;  // first step reported after the restart
  std::optional<int64_t> steps_lost;   // completed steps done again
  std::string cause;                   // one line: who failed and how
};

struct Marker {  // checkpoints and node events
  int64_t time_ms = 0;
  std::string kind;  // "checkpoint", "restore", "round", "excluded", "lost", "joined", ...
  std::string label;
};

struct Timeline {
  std::string run_id;
  std::string primary_node;
  std::string version;  // of the agent that wrote the log
  int64_t start_ms = 0;
  int64_t end_ms = 0;
  std::string outcome;  // "succeeded", "failed", or "" (running, or the end is not logged)
  std::string outcome_reason;
  std::vector<Attempt> attempts;
  std::vector<Fault> faults;
  std::vector<Recovery> recoveries;
  std::vector<Marker> markers;
  std::vector<std::string> missing;  // what the page must say it could not know
};

// `records` in file order. An empty input gives a timeline whose `missing` says so.
Timeline BuildTimeline(const std::vector<EventRecord>& records);

}  // namespace ftrun::launcher::report
