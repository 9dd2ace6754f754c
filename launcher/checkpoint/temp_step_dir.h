// TempStepDir: the temporary directory a checkpoint of one step is written into before its
// rename (<root>/.ftrun-step-<S>.tmp-<pid>-<n>/), made so that a writer that dies in the
// middle (an agent SIGKILLed or OOM-killed while persisting gigabytes) does not leave it
// behind for good: the directory holds a marker file, `.ftrun-writer`, that its writer keeps
// locked (flock) for as long as it writes and that names the machine's current boot
// (/proc/sys/kernel/random/boot_id). The marker is removed just before the rename, so no
// complete checkpoint ever holds it.
//
// SweepAbandonedStepDirs removes the temporary step directories under a root whose marker
// names this boot of this machine and whose lock is free: their writer is gone (a lock dies
// with its process). Nothing else is touched: a directory without the marker (checkpoint.py's,
// another version's), one written on another machine or before a reboot (on storage that
// several nodes share, a lock taken elsewhere may not be visible here), or one whose writer
// still holds the lock. Writers on one machine see each other's flocks on any filesystem,
// since the lock table is the kernel's.
//
// Thread: any (blocking file I/O). Errors name the path and errno's text.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"

namespace ftrun::launcher {

class TempStepDir {
 public:
  // Creates <root>/.ftrun-step-<step>.tmp-<unique>/ with its locked marker. When the marker
  // cannot be made or locked (a filesystem without flock), the directory is still made,
  // without a marker: it is never swept, as before.
  static Result<TempStepDir> Make(const std::string& root, uint64_t step);

  TempStepDir(TempStepDir&& other) noexcept;
  TempStepDir& operator=(TempStepDir&&) = delete;
  TempStepDir(const TempStepDir&) = delete;
  ~TempStepDir();  // releases the lock (the directory itself is the caller's to remove)

  const std::string& path() const { return path_; }
  // Removes the marker, keeping the lock until destruction: call it right before renaming the
  // directory into place.
  void DropMarker();

 private:
  TempStepDir(std::string path, int lock_fd) : path_(std::move(path)), lock_fd_(lock_fd) {}
  std::string path_;
  int lock_fd_ = -1;
};

// Removes the abandoned temporary step directories under `root` (see above), with an info
// line for each; returns their paths. A directory that cannot be removed gets a warning.
std::vector<std::string> SweepAbandonedStepDirs(const std::string& root);

// This boot's id ("" when the kernel does not give one: then nothing is marked or swept).
const std::string& BootId();

}  // namespace ftrun::launcher
