// The file operations of ftrun's checkpoint format (checkpoint_writer.h describes the format)
// that WriteCheckpoint and StageShards share: a group's part written with PART.json, the
// manifest, the tracker and the script's link. Every file written is fsynced and every JSON
// file goes in by tmp + rename, as scripts/python/ftrun/checkpoint.py does.
//
// Thread: any (blocking file I/O). Errors name the path and errno's text.
#pragma once

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "common/result.h"
#include "launcher/checkpoint/checkpoint_writer.h"

namespace ftrun::launcher::checkpoint_io {

using WallTime = std::chrono::system_clock::time_point;

struct FileEntry {
  uint64_t size = 0;
  // zlib's CRC-32 of the file's bytes, what the agent records for each file it writes; a
  // file recorded by Python or by ftrun before 2026-11-29 may carry sha256 instead (hex).
  std::optional<uint32_t> crc32;
  std::string sha256;
  // The CRC-32C of a file of snapshot bytes (the one recorded at the snapshot's commit),
  // recorded in PART.json and the manifest beside crc32.
  std::optional<uint32_t> crc32c;
};
using Files = std::map<std::string, FileEntry>;  // sorted, as json.dump(sort_keys=True)

Error Failed(const std::string& doing, const std::string& path, int error = errno);
Status FsyncPath(const std::string& path);
// A JSON string literal of printable ASCII (names are checked to be that).
std::string Json(const std::string& s);
// A group's manifest entry: {"dir": ..., "files": {...}}.
std::string PartEntry(const std::string& group, const Files& files);
// Every group and file name printable ASCII, plain, and unique.
Status CheckNames(const CheckpointRequest& request);
// A file name as CheckNames accepts it: plain (no '/', not '.' or '..', not PART.json or a
// name starting with it: PART.json's temporary name), printable ASCII, not empty.
bool PlainFileName(const std::string& name);

// checkpoint.py's write_part for files in memory: tmp/<PartDirName(group)>/ with the files
// and PART.json, all fsynced.
Result<Files> WritePart(const std::string& tmp, const CheckpointPart& part, uint64_t step);
// MANIFEST.json in `dir` from the groups' entries (group -> PartEntry), then `dir` fsynced.
Status WriteManifest(const std::string& dir, uint64_t step, int world_size,
                     const std::string& reason, const std::map<std::string, std::string>& entries);
// root/name holds the newest step this run stored: never lowered by this run (an older step
// persisted late does not hide a newer one), but a tracker last written before run_started
// (an earlier run's, earlier_run.h) is replaced whatever it names, as DLRover's saves overwrite
// it. Under an flock on the directory root, so that writers on several nodes sharing root agree.
Status WriteTracker(const std::string& root, const std::string& name, uint64_t step,
                    WallTime run_started);
// A suffix for a temporary name that no other writer uses at the same time, in this process
// (threads included: a per-process counter) or another, on any node sharing the directory
// ("<pid>-<random>-<n>": agents in containers of several nodes often share a pid, and their
// counters advance alike).
std::string UniqueSuffix();
// checkpoint_links.cc: the links.
// Points `link` at `target` atomically (a relative symbolic link, as engine.py's _link). A
// real file or directory already at `link` is left alone, with a warning.
Status LinkTo(const std::string& link, const std::string& target);
// Each part's own link (CheckpointPart::link) to its directory under `step_dir` (the stored
// step, or the request's link to it); a failure is logged at warning.
void LinkParts(const CheckpointRequest& request, const std::string& step_dir);
// A path a worker names for the agent to write: absolute, no control characters.
bool AbsoluteWithoutControls(const std::string& path);

}  // namespace ftrun::launcher::checkpoint_io
