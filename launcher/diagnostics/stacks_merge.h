// The merged stacks of a job: every rank's dump (Python and native), identical stacks merged
// across ranks with their ranks folded ("0-2"), and the ranks whose main thread is somewhere
// the majority's is not marked — in a hang, the ranks stuck in user code while the others
// wait for them in a collective. Rendered as a text report and a flame-graph SVG
// (stacks_svg.h).
//
// Pure: no I/O, no clock. Thread: any. Errors: none; a rank without a usable dump is listed
// under "no stack" with the reason it was given.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "launcher/diagnostics/stacks.h"
#include "rendezvous/job_state.h"

namespace ftrun::launcher {

// What was collected from one rank (the same on the wire). Texts are bounded by the
// collector.
using RankDump = rendezvous::RankStack;

// Ranks whose stacks (one thread each) are identical.
struct StackGroup {
  std::vector<int> ranks;  // sorted
  ThreadStack stack;       // the shared stack (of the lowest rank)
  bool differs = false;    // main threads: not where the largest group is
  int threads = 0;         // how many threads share it (other threads: a rank may have several)
};

struct MergedStacks {
  int rank_count = 0;              // ranks given
  std::vector<StackGroup> main;    // main threads (or each rank's first), largest group first
  std::vector<StackGroup> other;   // the other Python threads, largest group first
  std::vector<StackGroup> native;  // native threads, largest group first
  std::vector<int> no_stack;       // ranks without a Python stack
  std::map<int, std::string> notes;

  // Ranks of the main-thread groups marked `differs`, sorted.
  std::vector<int> DifferingRanks() const;
  // One line for the agent's log: "rank(s) 3 stuck where the others are not (0-2):
  // train.py:42 in slow_step", or "all 4 ranks at ..." when none differs.
  std::string Summary() const;
};

MergedStacks MergeStacks(const std::vector<RankDump>& dumps);

// The report as text: a header line `title`, the summary, every group with its folded
// ranks and frames (most recent call first), the other threads, native stacks, and the
// ranks without a stack with why. `native_note` (e.g. "eu-stack not installed") is printed
// once when no native stack was collected.
std::string RenderStacksText(const MergedStacks& merged, const std::string& title,
                             const std::string& native_note);

}  // namespace ftrun::launcher
