// The runs rule of ftrun's checkpoint directories (ftrun-flash-checkpoint(7), "Runs sharing a
// directory"): what a directory holds from before this run began (the job's start, from the
// rendezvous) is an earlier run's. Its steps do not supersede this run's (the writers and the
// Python loaders go by that) and are replaced by this run's copy of the same step; its tracker
// is replaced whatever it names (WriteTracker). A file's age is its
// modification time, so the clocks of the nodes and the file server must agree (the agents
// report their start 2 s early for that).
//
// Thread: any (blocking file I/O: stat, rename, remove). Nothing here fails loudly: a file that
// cannot be looked at counts as missing, a directory that cannot be moved is left in place.
#pragma once

#include <cstdint>
#include <string>

#include "launcher/checkpoint/checkpoint_io.h"

namespace ftrun::launcher::checkpoint_io {

// Whether `file` exists and was last modified at or after run_started (by this run): one
// stat for "complete (its manifest or PART.json there) and not an earlier run's".
bool WrittenSince(const std::string& file, WallTime run_started);
// Whether `file` exists and was last modified before run_started (by an earlier run; also
// WriteTracker's test of the tracker).
bool WrittenBefore(const std::string& file, WallTime run_started);
// Moves the directory `dir` to `aside` (a name the loaders skip) and removes it there when its
// file `marker` was written before run_started; true when it did. Safe with several writers:
// a directory found to be this run's once moved is put back (or dropped when another copy of
// this run took its place meanwhile).
bool SetAsideIfEarlier(const std::string& dir, const std::string& marker, const std::string& aside,
                       WallTime run_started);
// <root>/ftrun-step-<step>, when an earlier run stored it (its MANIFEST.json written before
// run_started), is moved out of the loaders' sight (<root>/.ftrun-step-<S>.deleted-<suffix>,
// the name the loaders skip and remove) and removed, so that this run's copy of the step takes
// its place. A step this run stored, or one that cannot be moved, is left as it is.
void SetAsideEarlierRun(const std::string& root, uint64_t step, WallTime run_started);

}  // namespace ftrun::launcher::checkpoint_io
