// Stacks of hung ranks, as text: Python's faulthandler dumps and elfutils' eu-stack output
// parsed into threads and frames, and rank lists folded into ranges ("0-3,8").
//
// Pure: no I/O. Thread: any. Errors: parsing never fails; lines it does not understand are
// skipped, and a text with no stack in it gives no threads.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ftrun::launcher {

struct StackFrame {
  std::string file;  // Python: the source path; native: the module ("" when unknown)
  int line = 0;      // 0: unknown (native)
  std::string func;  // "??" when unknown
  bool operator==(const StackFrame&) const = default;
  // "train.py:42 in slow_step" (the file's base name; native: "func (module)").
  std::string Short() const;
};

struct ThreadStack {
  std::string id;                  // "0x00007f..." (Python) or the TID (native)
  bool current = false;            // faulthandler's "Current thread": the one that dumped
  std::vector<StackFrame> frames;  // most recent call first
  // The thread that runs the script's module code (its outermost frame is <module>).
  bool IsMain() const { return !frames.empty() && frames.back().func == "<module>"; }
};

// Python's faulthandler format ("Thread 0x... (most recent call first):" and, per frame,
// `  File "path", line N in func`). At most `max_threads` threads and `max_frames` frames
// each are kept.
std::vector<ThreadStack> ParsePythonStacks(std::string_view text, size_t max_threads = 256,
                                           size_t max_frames = 128);
// eu-stack's format ("TID n:" and "#k  0xADDR func[ - module]").
std::vector<ThreadStack> ParseNativeStacks(std::string_view text, size_t max_threads = 256,
                                           size_t max_frames = 128);

// Sorted, unique ranks folded into ranges: {0,1,2,3,8} -> "0-3,8"; {} -> "".
std::string FoldRanks(std::vector<int> ranks);

}  // namespace ftrun::launcher
