// The links of ftrun's checkpoint format (checkpoint_io.h): the script's `path` to a stored
// step, and each part's own link (Megatron-LM's iter_<N>/mp_rank_XX) to its directory.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "common/log.h"
#include "launcher/checkpoint/checkpoint_io.h"

namespace ftrun::launcher::checkpoint_io {

namespace fs = std::filesystem;

Status LinkTo(const std::string& link, const std::string& target) {
  std::error_code ec;
  fs::path where = fs::absolute(link, ec);
  if (ec) return Error{"the path " + link + ": " + ec.message()};
  auto status = fs::symlink_status(where, ec);
  if (fs::exists(status) && !fs::is_symlink(status)) {
    LauncherLog()->warn("{} exists and is not a link; the checkpoint is at {}", link, target);
    return {};
  }
  fs::create_directories(where.parent_path(), ec);
  if (ec) return Error{"creating " + where.parent_path().string() + ": " + ec.message()};
  fs::path relative = fs::relative(target, where.parent_path(), ec);
  if (ec) relative = target;
  std::string tmp =
      (where.parent_path() / ("." + where.filename().string() + ".link-" + UniqueSuffix()))
          .string();
  unlink(tmp.c_str());
  if (symlink(relative.c_str(), tmp.c_str()) != 0) return Failed("linking", tmp);
  if (rename(tmp.c_str(), where.c_str()) != 0) {
    unlink(tmp.c_str());
    return Failed("renaming to", where.string());
  }
  return {};
}

bool AbsoluteWithoutControls(const std::string& path) {
  if (path.empty() || path[0] != '/') return false;
  return std::none_of(path.begin(), path.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u < 0x20 || u == 0x7f;
  });
}

void LinkParts(const CheckpointRequest& request, const std::string& step_dir) {
  if (step_dir.empty()) return;
  for (const auto& part : request.parts) {
    if (part.link.empty()) continue;
    if (auto s = LinkTo(part.link, step_dir + "/" + PartDirName(part.group)); !s) {
      LauncherLog()->warn("flash checkpoint: {} does not lead to shard {} of step {}: {}",
                          part.link, part.group, request.step, s.error().message);
    }
  }
}

}  // namespace ftrun::launcher::checkpoint_io
