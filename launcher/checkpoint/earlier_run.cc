#include "launcher/checkpoint/earlier_run.h"

#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "common/log.h"

namespace ftrun::launcher::checkpoint_io {
namespace {

// When `file` was last modified; nullopt when it is missing.
std::optional<WallTime> ModifiedAt(const std::string& file) {
  struct stat st {};
  if (stat(file.c_str(), &st) != 0) return std::nullopt;
  return WallTime(std::chrono::duration_cast<WallTime::duration>(
      std::chrono::seconds(st.st_mtim.tv_sec) + std::chrono::nanoseconds(st.st_mtim.tv_nsec)));
}

}  // namespace

bool WrittenSince(const std::string& file, WallTime run_started) {
  auto at = ModifiedAt(file);
  return at && *at >= run_started;
}

bool WrittenBefore(const std::string& file, WallTime run_started) {
  auto at = ModifiedAt(file);
  return at && *at < run_started;
}

bool SetAsideIfEarlier(const std::string& dir, const std::string& marker, const std::string& aside,
                       WallTime run_started) {
  if (!WrittenBefore(dir + "/" + marker, run_started)) return false;
  if (rename(dir.c_str(), aside.c_str()) != 0) return false;
  std::error_code ec;
  // The check and the move are two steps, and another writer of this run may have replaced
  // `dir` between them (or a file server's cached attributes were stale): what was moved is
  // looked at again under its new name, and put back when it is this run's.
  if (!WrittenBefore(aside + "/" + marker, run_started)) {
    if (rename(aside.c_str(), dir.c_str()) != 0) {
      std::filesystem::remove_all(aside, ec);  // one is in place
    }
    return false;
  }
  std::filesystem::remove_all(aside, ec);
  return true;
}

void SetAsideEarlierRun(const std::string& root, uint64_t step, WallTime run_started) {
  const std::string final_dir = root + "/ftrun-step-" + std::to_string(step);
  if (SetAsideIfEarlier(
          final_dir, "MANIFEST.json",
          root + "/.ftrun-step-" + std::to_string(step) + ".deleted-" + UniqueSuffix(),
          run_started)) {
    LauncherLog()->info("checkpoint {} was stored before this run began: replaced by this run's",
                        final_dir);
  }
}

}  // namespace ftrun::launcher::checkpoint_io
