// WriteCheckpoint: writes memory snapshots to storage in ftrun's one checkpoint format, the
// format of scripts/python/ftrun/checkpoint.py, so that its latest() and verify() (and the
// flash-checkpoint loaders built on them) accept what the agent writes:
//
//   <root>/.ftrun-step-<S>.tmp-<pid>-<ns>/   written first; every file fsynced; its locked
//       .ftrun-writer marker (temp_step_dir.h) removed before the rename, so that the next
//       writer on this machine removes the directory if this one is killed mid-write
//       group-<name>/<file>...               one directory per replica group (part_dir_name)
//       group-<name>/PART.json               the group's files with size and CRC-32
//       MANIFEST.json                        format 1, step, world size, groups, reason
//   then renamed to <root>/ftrun-step-<S>/ and <root> fsynced; then the tracker (if asked:
//   <root>/<tracker> holds the newest step of this run, see run_started) by write, fsync,
//   rename; then the link (if asked) that the script's `path` becomes.
//
// A complete checkpoint of this run is never overwritten: if ftrun-step-<S> exists, it is kept
// as it is and the new copy discarded (as checkpoint.py's finalize does); one an earlier run
// stored is replaced. On any error the temporary
// directory is removed and nothing else changes. Each snapshot is checked against its crc32
// while it is written, when its checksum is known: a snapshot corrupted in memory is not
// persisted.
//
// Names: group names and file names are printable ASCII (the manifest's JSON is written
// ASCII-only, as Python's json.dump does); a file name is a plain name (no '/', not '.' or
// '..', not PART.json).
//
// Thread: any (blocking file I/O: run it off the loop, see SnapshotPersister). Errors name the
// path and errno's text, e.g. "writing /ckpt/.ftrun-step-6.tmp-1-2/group-all/state.bin: File
// too large".
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "launcher/checkpoint/snapshot_store.h"
#include "launcher/replica/replica_store.h"

namespace ftrun::launcher {

// One file of a group: `header` then the snapshot's bytes (either may be empty), or the
// replica's (a copy of another node's snapshot, checked against its crc32 when it arrived).
struct CheckpointFile {
  std::string name;
  std::string header;
  std::optional<SnapshotView> snapshot;
  std::optional<ReplicaView> replica = std::nullopt;  // used when there is no snapshot
};

// One replica group's files ("" for the single copy of a DDP job, "rank-<r>" for a shard).
struct CheckpointPart {
  std::string group;
  std::vector<CheckpointFile> files;
  // Made a symbolic link to this part's directory in the stored step, through the request's
  // `link` (so written even before the step is complete: it resolves once the step is); ""
  // for none. A failure is logged, not an error: the checkpoint is whole without it.
  std::string link = {};
};

struct CheckpointRequest {
  std::string root;  // the checkpoint directory (created if missing)
  uint64_t step = 0;
  int world_size = 1;
  std::string reason = "flash";  // recorded in the manifest ("periodic", "fault", ...)
  std::vector<CheckpointPart> parts;
  std::string tracker;  // file name under root recording the newest step; "" for none
  // Made a symbolic link to the stored copy (its one file, or the checkpoint's directory when
  // it has more); "" for none. A real file or directory there is left alone, with a warning.
  std::string link;
  // The parts are some of the shards of a step that several writers (the agents of a
  // multi-node job) store together: written by StageShards (staged_checkpoint.h), not
  // WriteCheckpoint.
  bool shared = false;
  // When this run began (the job's start, the earliest agent's; FlashService): what is stored
  // under root from before it is an earlier run's, which this run's saves replace as DLRover's
  // do: the tracker may be lowered (a new run that did not resume saves lower steps) and a
  // step stored again is replaced; within the run the tracker is never lowered and a stored
  // step is kept. The default (the epoch) counts everything as this run's. StageShards applies
  // it too (its staged parts included): every writer of a step must be given the same time.
  std::chrono::system_clock::time_point run_started{};
};

// Writes the checkpoint; returns its final directory (<root>/ftrun-step-<S>).
Result<std::string> WriteCheckpoint(const CheckpointRequest& request);

// checkpoint.py's part_dir_name: "group-all" for "", else "group-<safe name>-<sha1[:8]>".
std::string PartDirName(const std::string& group);

}  // namespace ftrun::launcher
