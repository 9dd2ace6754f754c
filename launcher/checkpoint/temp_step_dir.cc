#include "launcher/checkpoint/temp_step_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>

#include "common/log.h"
#include "launcher/checkpoint/checkpoint_io.h"

namespace ftrun::launcher {
namespace {

namespace fs = std::filesystem;

constexpr const char* kMarker = "/.ftrun-writer";

bool IsTempStepDirName(const std::string& name) {
  return name.rfind(".ftrun-step-", 0) == 0 && name.find(".tmp-") != std::string::npos;
}

// The boot id a marker names (its first word), read through the descriptor the sweep locks.
std::string MarkerBoot(int fd) {
  char buf[128];
  const ssize_t n = pread(fd, buf, sizeof(buf), 0);
  if (n <= 0) return "";
  const std::string text(buf, static_cast<size_t>(n));
  return text.substr(0, text.find_first_of(" \n"));
}

}  // namespace

const std::string& BootId() {
  static const std::string id = [] {
    std::ifstream in("/proc/sys/kernel/random/boot_id");
    std::string line;
    std::getline(in, line);
    return line.find_first_of(" \n\t") == std::string::npos ? line : std::string();
  }();
  return id;
}

Result<TempStepDir> TempStepDir::Make(const std::string& root, uint64_t step) {
  // A name can be taken by a directory an earlier writer with this pid left (a restarted
  // container's agent often gets the same pid): the next suffix is another name.
  std::string path;
  for (int attempt = 0;; ++attempt) {
    path = root + "/.ftrun-step-" + std::to_string(step) + ".tmp-" + checkpoint_io::UniqueSuffix();
    if (mkdir(path.c_str(), 0755) == 0) break;
    if (errno != EEXIST || attempt == 100) return checkpoint_io::Failed("creating", path);
  }
  if (BootId().empty()) return TempStepDir(std::move(path), -1);
  const std::string marker = path + kMarker;
  int fd = open(marker.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0644);
  if (fd < 0) return TempStepDir(std::move(path), -1);
  // Written only once locked: a sweep that reads this boot's id finds the lock taken.
  const std::string text = BootId() + " " + std::to_string(getpid()) + "\n";
  if (flock(fd, LOCK_EX | LOCK_NB) != 0 ||
      write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    close(fd);
    unlink(marker.c_str());
    return TempStepDir(std::move(path), -1);
  }
  return TempStepDir(std::move(path), fd);
}

TempStepDir::TempStepDir(TempStepDir&& other) noexcept
    : path_(std::move(other.path_)), lock_fd_(other.lock_fd_) {
  other.lock_fd_ = -1;
}

TempStepDir::~TempStepDir() {
  if (lock_fd_ >= 0) close(lock_fd_);
}

void TempStepDir::DropMarker() {
  if (lock_fd_ >= 0) unlink((path_ + kMarker).c_str());
}

std::vector<std::string> SweepAbandonedStepDirs(const std::string& root) {
  std::vector<std::string> removed;
  if (BootId().empty()) return removed;
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code type_ec;
    if (!IsTempStepDirName(name) || !it->is_directory(type_ec) || it->is_symlink(type_ec)) {
      continue;
    }
    const std::string dir = it->path().string();
    const int fd = open((dir + kMarker).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;
    if (MarkerBoot(fd) == BootId() && flock(fd, LOCK_EX | LOCK_NB) == 0) {
      std::error_code rm_ec;
      fs::remove_all(dir, rm_ec);
      if (rm_ec) {
        LauncherLog()->warn("cannot remove the abandoned partial checkpoint {}: {}", dir,
                            rm_ec.message());
      } else {
        LauncherLog()->info(
            "removed the partial checkpoint {}: its writer on this machine is gone (killed while "
            "writing)",
            dir);
        removed.push_back(dir);
      }
    }
    close(fd);
  }
  return removed;
}

}  // namespace ftrun::launcher
