#include "launcher/channels/stale_control_dirs.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/log.h"

namespace ftrun::launcher {
namespace {

namespace fs = std::filesystem;

// Whether nobody listens on the Unix socket at `path` any more.
bool Refused(const std::string& path) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) return false;
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return false;
  const int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  const int err = errno;
  ::close(fd);
  return rc != 0 && err == ECONNREFUSED;
}

bool IsStale(const fs::path& dir) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid()) {
    return false;
  }
  std::error_code ec;
  bool socket_only = false;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().filename() != "agent.sock" || !entry.is_socket()) return false;
    socket_only = true;
  }
  return !ec && socket_only && Refused((dir / "agent.sock").string());
}

}  // namespace

int RemoveStaleControlDirs(const std::string& tmp_root) {
  std::error_code ec;
  int removed = 0;
  for (const auto& entry : fs::directory_iterator(tmp_root, ec)) {
    const fs::path dir = entry.path();
    if (dir.filename().string().rfind("ftrun-control-", 0) != 0 || !IsStale(dir)) continue;
    std::error_code rm;
    fs::remove(dir / "agent.sock", rm);
    if (!rm) fs::remove(dir, rm);
    if (rm) {
      LauncherLog()->warn("cannot remove the stale control directory {}: {}", dir.string(),
                          rm.message());
      continue;
    }
    ++removed;
    LauncherLog()->info("removed the stale control directory {} (its agent is gone)", dir.string());
  }
  return removed;
}

}  // namespace ftrun::launcher
