// StageShards: stores some of the shards of a sharded step in a checkpoint directory that
// the agents of several nodes share, so that the step becomes a checkpoint in ftrun's one
// format (checkpoint_writer.h) as soon as all of its world size's shards are on storage,
// whichever agents wrote them, and never before.
//
//   <root>/.ftrun-step-<S>.parts/              the step's staging area, shared by the writers
//       .tmp-<pid>-<ns>/group-<g>/...          one writer's part being written (fsynced)
//       group-<g>/{<file>,PART.json}           a complete part, renamed into place
//   <root>/.ftrun-step-<S>.tmp-<pid>-<ns>/     the finisher's checkpoint: hard links to the
//                                              staged files, MANIFEST.json written last
//   <root>/ftrun-step-<S>/                     renamed into place; then the tracker, the link
//
// Every writer, after placing its parts, checks whether the parts of groups rank-0 ..
// rank-(W-1) are all staged; whoever sees them all builds the checkpoint and renames it into
// place (a rename onto an existing checkpoint fails and that writer's copy is discarded, so
// one wins and an existing complete step is never overwritten). A part already staged by
// another writer (e.g. a replica holder) is not written again. Staging areas of this step and
// older ones are removed once the step is complete. The tracker is written only after the
// rename, under an flock (WriteTracker), so it never names a partial step. A step is not
// staged at all when a checkpoint of it, or of a newer step, is complete already.
// What the directory holds from before request.run_started is an earlier run's, as for
// WriteCheckpoint: its complete steps neither supersede this step nor stay in its place (the
// same step is set aside and replaced), its staged parts are not counted and are replaced,
// and its tracker is lowered. Every writer must be given the same time, the job's (the
// earliest start of its agents, from the rendezvous: FlashService::SetJobRunStarted); the
// epoch makes everything this run's.
//
// A writer killed at any point leaves only names starting with '.', which loaders ignore; the
// next job's load_checkpoint removes stale staging areas (engine.py) so that parts of an
// earlier run's timeline are never mixed with a later one's.
//
// Thread: any (blocking file I/O, run off the loop by SnapshotPersister). Errors name the
// path and errno's text; a part that another writer completed first is not an error.
#pragma once

#include <string>

#include "common/result.h"
#include "launcher/checkpoint/checkpoint_writer.h"

namespace ftrun::launcher {

// request.parts: the shards this writer holds (groups "rank-<r>", r < world_size); the
// request's other fields as for WriteCheckpoint. Returns the final directory when the step is
// complete (by this writer or another), otherwise a sentence saying which shards are missing.
Result<std::string> StageShards(const CheckpointRequest& request);

// The directory of the step's staging area under root.
std::string StagingDir(const std::string& root, uint64_t step);

}  // namespace ftrun::launcher
