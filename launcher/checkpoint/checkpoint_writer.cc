#include "launcher/checkpoint/checkpoint_writer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <map>

#include "common/log.h"
#include "launcher/checkpoint/checkpoint_io.h"
#include "launcher/checkpoint/earlier_run.h"
#include "launcher/checkpoint/temp_step_dir.h"

namespace ftrun::launcher {
namespace {

namespace fs = std::filesystem;
using namespace checkpoint_io;

// The parts and the manifest inside the temporary directory `tmp`.
Status WriteContents(const std::string& tmp, const CheckpointRequest& request) {
  std::map<std::string, std::string> entries;  // group -> its manifest entry
  for (const auto& part : request.parts) {
    auto files = WritePart(tmp, part, request.step);
    if (!files) return files.error();
    entries[part.group] = PartEntry(part.group, *files);
  }
  return WriteManifest(tmp, request.step, request.world_size, request.reason, entries);
}

// What the request's link points at: the one file of a one-file checkpoint, else its
// directory.
std::string LinkTarget(const CheckpointRequest& request, const std::string& final_dir) {
  if (request.parts.size() == 1 && request.parts[0].files.size() == 1) {
    std::string file = final_dir + "/" + PartDirName(request.parts[0].group) + "/" +
                       request.parts[0].files[0].name;
    std::error_code ec;
    if (fs::exists(file, ec)) return file;
  }
  return final_dir;
}

}  // namespace

Result<std::string> WriteCheckpoint(const CheckpointRequest& request) {
  if (auto s = CheckNames(request); !s) return s.error().Wrap("checkpoint under " + request.root);
  std::error_code ec;
  fs::create_directories(request.root, ec);
  if (ec) return Error{"creating " + request.root + ": " + ec.message()};
  SweepAbandonedStepDirs(request.root);
  auto temp = TempStepDir::Make(request.root, request.step);
  if (!temp) return temp.error();
  const std::string& tmp = temp->path();
  std::string final_dir = request.root + "/ftrun-step-" + std::to_string(request.step);
  Status written = WriteContents(tmp, request);
  if (written) temp->DropMarker();
  if (written) SetAsideEarlierRun(request.root, request.step, request.run_started);
  if (written && fs::exists(final_dir, ec)) {
    LauncherLog()->info("checkpoint {} already exists: kept as it is", final_dir);
    fs::remove_all(tmp, ec);
  } else if (written && rename(tmp.c_str(), final_dir.c_str()) != 0) {
    if (errno == EEXIST || errno == ENOTEMPTY) {  // another writer's copy won the race: kept
      fs::remove_all(tmp, ec);
    } else {
      written = Failed("renaming into place", final_dir);
    }
  } else if (written) {
    written = FsyncPath(request.root);
  }
  if (!written) {
    fs::remove_all(tmp, ec);
    return written.error();
  }
  if (!request.tracker.empty()) {
    if (auto s = WriteTracker(request.root, request.tracker, request.step, request.run_started);
        !s) {
      return s.error().Wrap(final_dir + " is complete, but its tracker is not updated");
    }
  }
  if (!request.link.empty()) {
    if (auto s = LinkTo(request.link, LinkTarget(request, final_dir)); !s) {
      return s.error().Wrap(final_dir + " is complete, but " + request.link +
                            " does not point at it");
    }
  }
  // To the step itself: the request's link may lead to its one file.
  LinkParts(request, final_dir);
  return Ok(final_dir);
}

}  // namespace ftrun::launcher
