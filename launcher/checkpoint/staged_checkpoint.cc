#include "launcher/checkpoint/staged_checkpoint.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>

#include "common/log.h"
#include "launcher/checkpoint/checkpoint_io.h"
#include "launcher/checkpoint/earlier_run.h"
#include "launcher/checkpoint/temp_step_dir.h"

namespace ftrun::launcher {
namespace {

namespace fs = std::filesystem;
using namespace checkpoint_io;

// The newest step under root whose checkpoint is complete (has its manifest) and not an
// earlier run's, if any.
std::optional<uint64_t> NewestComplete(const std::string& root, WallTime run_started) {
  static const std::regex kFinal(R"(ftrun-step-(\d+))");
  std::optional<uint64_t> newest;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    std::smatch m;
    std::string name = entry.path().filename().string();
    if (!std::regex_match(name, m, kFinal)) continue;
    if (!WrittenSince(entry.path() / "MANIFEST.json", run_started)) continue;
    uint64_t step = std::stoull(m[1].str());
    if (!newest || step > *newest) newest = step;
  }
  return newest;
}

// Puts one part into the staging area, unless this run staged a complete part of its group
// there already (an earlier run's is set aside first).
Status StagePart(const std::string& staging, const CheckpointPart& part, uint64_t step,
                 WallTime run_started) {
  std::string dest = staging + "/" + PartDirName(part.group);
  std::error_code ec;
  // An earlier run's part goes out of the way, under a name no part has.
  SetAsideIfEarlier(dest, "PART.json", staging + "/.deleted-" + UniqueSuffix(), run_started);
  if (fs::exists(dest + "/PART.json", ec)) return {};
  std::string tmp = staging + "/.tmp-" + UniqueSuffix();
  if (mkdir(tmp.c_str(), 0755) != 0) return Failed("creating", tmp);
  Status status;
  if (auto files = WritePart(tmp, part, step); !files) {
    status = files.error();
  } else if (rename((tmp + "/" + PartDirName(part.group)).c_str(), dest.c_str()) != 0 &&
             errno != EEXIST && errno != ENOTEMPTY) {  // else another writer's part is there
    status = Failed("renaming into place", dest);
  } else {
    status = FsyncPath(staging);
  }
  fs::remove_all(tmp, ec);
  return status;
}

// A staged part's files as its PART.json lists them; an error when it is not for `step`.
Result<Files> ReadPart(const std::string& dir, uint64_t step) {
  std::ifstream in(dir + "/PART.json");
  std::stringstream text;
  text << in.rdbuf();
  google::protobuf::Struct part;
  if (!in || !google::protobuf::util::JsonStringToMessage(text.str(), &part).ok()) {
    return Error{"unreadable " + dir + "/PART.json"};
  }
  const auto& fields = part.fields();
  auto step_field = fields.find("step");
  auto files_field = fields.find("files");
  if (step_field == fields.end() ||
      step_field->second.number_value() != static_cast<double>(step) ||
      files_field == fields.end() || !files_field->second.has_struct_value()) {
    return Error{dir + "/PART.json is not a part of step " + std::to_string(step)};
  }
  Files files;
  for (const auto& [name, meta] : files_field->second.struct_value().fields()) {
    const auto& m = meta.struct_value().fields();
    auto size = m.find("size");
    auto sha = m.find("sha256");
    auto crc32 = m.find("crc32");
    if (size == m.end() || (sha == m.end() && crc32 == m.end())) {
      return Error{dir + "/PART.json: file " + name + " without its size and checksum"};
    }
    FileEntry& entry = files[name];
    entry.size = static_cast<uint64_t>(size->second.number_value());
    if (sha != m.end()) entry.sha256 = sha->second.string_value();
    if (crc32 != m.end()) entry.crc32 = static_cast<uint32_t>(crc32->second.number_value());
    if (auto crc = m.find("crc32c"); crc != m.end()) {
      entry.crc32c = static_cast<uint32_t>(crc->second.number_value());
    }
  }
  return files;
}

// Builds the step's checkpoint from the staged parts of every group (hard links, so no byte
// is copied) and renames it into place. An existing complete checkpoint is kept.
Status Finish(const CheckpointRequest& request, const std::string& staging,
              const std::map<std::string, Files>& parts, const std::string& final_dir) {
  SweepAbandonedStepDirs(request.root);
  auto temp = TempStepDir::Make(request.root, request.step);
  if (!temp) return temp.error();
  const std::string& tmp = temp->path();
  std::map<std::string, std::string> entries;
  Status status;
  for (const auto& [group, files] : parts) {
    std::string from = staging + "/" + PartDirName(group);
    std::string to = tmp + "/" + PartDirName(group);
    if (mkdir(to.c_str(), 0755) != 0) status = Failed("creating", to);
    for (const auto& [name, entry] : files) {
      if (!status) break;
      struct stat st {};
      if (stat((from + "/" + name).c_str(), &st) != 0 ||
          static_cast<uint64_t>(st.st_size) != entry.size) {
        status = Error{from + "/" + name + " is missing or has the wrong size"};
      } else if (link((from + "/" + name).c_str(), (to + "/" + name).c_str()) != 0) {
        status = Failed("linking", to + "/" + name);
      }
    }
    if (status && link((from + "/PART.json").c_str(), (to + "/PART.json").c_str()) != 0) {
      status = Failed("linking", to + "/PART.json");
    }
    if (status) status = FsyncPath(to);
    if (!status) break;
    entries[group] = PartEntry(group, files);
  }
  if (status) {
    status = WriteManifest(tmp, request.step, request.world_size, request.reason, entries);
  }
  std::error_code ec;
  if (status) temp->DropMarker();
  // Only now that this run's copy is whole: a failed one never leaves the step without one.
  if (status) SetAsideEarlierRun(request.root, request.step, request.run_started);
  if (status && rename(tmp.c_str(), final_dir.c_str()) != 0) {
    if (errno == EEXIST || errno == ENOTEMPTY) {
      LauncherLog()->info("checkpoint {} completed by another writer: kept as it is", final_dir);
    } else {
      status = Failed("renaming into place", final_dir);
    }
  } else if (status) {
    status = FsyncPath(request.root);
  }
  fs::remove_all(tmp, ec);  // no-op after a successful rename
  return status;
}

// Removes the staging areas of `step` and older steps (a complete step makes them useless).
void RemoveStaging(const std::string& root, uint64_t step) {
  static const std::regex kStaging(R"(\.ftrun-step-(\d+)\.parts)");
  std::error_code ec;
  std::vector<fs::path> old;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    std::smatch m;
    std::string name = entry.path().filename().string();
    if (std::regex_match(name, m, kStaging) && std::stoull(m[1].str()) <= step) {
      old.push_back(entry.path());
    }
  }
  for (const auto& path : old) fs::remove_all(path, ec);
}

}  // namespace

std::string StagingDir(const std::string& root, uint64_t step) {
  return root + "/.ftrun-step-" + std::to_string(step) + ".parts";
}

Result<std::string> StageShards(const CheckpointRequest& request) {
  if (auto s = CheckNames(request); !s) return s.error().Wrap("checkpoint under " + request.root);
  std::error_code ec;
  fs::create_directories(request.root, ec);
  if (ec) return Error{"creating " + request.root + ": " + ec.message()};
  std::string final_dir = request.root + "/ftrun-step-" + std::to_string(request.step);
  // A complete step at least as new as this one (another writer may complete one at any
  // time): this step's staging area is useless then, and removed if this writer made it.
  auto superseded = [&]() -> std::optional<std::string> {
    auto newest = NewestComplete(request.root, request.run_started);
    if (!newest || *newest < request.step) return std::nullopt;
    RemoveStaging(request.root, request.step);
    return request.root + "/ftrun-step-" + std::to_string(*newest);
  };
  if (auto newer = superseded()) return Ok(*newer);
  std::string staging = StagingDir(request.root, request.step);
  if (mkdir(staging.c_str(), 0755) != 0 && errno != EEXIST) return Failed("creating", staging);
  for (const auto& part : request.parts) {
    if (auto s = StagePart(staging, part, request.step, request.run_started); !s) {
      // The step may have been completed meanwhile, its staging area removed under us.
      if (auto newer = superseded()) return Ok(*newer);
      return s.error();
    }
  }
  // Through the step's link, which whoever completes the step makes: they resolve once it is.
  LinkParts(request, request.link);
  // Complete parts this run staged (listed, not counted up to the world size a worker
  // claimed): an earlier run's state of another rank must not complete this run's step.
  std::set<std::string> staged;
  for (const auto& entry : fs::directory_iterator(staging, ec)) {
    if (WrittenSince(entry.path() / "PART.json", request.run_started)) {
      staged.insert(entry.path().filename());
    }
  }
  std::map<std::string, Files> parts;
  std::string missing;
  int absent = 0;
  for (int rank = 0; static_cast<size_t>(rank) < staged.size() + 8 && rank < request.world_size;
       ++rank) {
    std::string group = ShardGroup(rank);
    auto files = staged.contains(PartDirName(group))
                     ? ReadPart(staging + "/" + PartDirName(group), request.step)
                     : Result<Files>(Error{"not staged"});
    if (files) {
      parts[group] = std::move(*files);
    } else if (++absent <= 8) {
      missing += (missing.empty() ? "" : ", ") + group;
    }
  }
  if (parts.size() < static_cast<size_t>(request.world_size)) {
    if (auto newer = superseded()) return Ok(*newer);
    return Ok(staging + ": " + std::to_string(parts.size()) + " of " +
              std::to_string(request.world_size) + " shards staged" +
              (missing.empty() ? "" : " (missing " + missing + (absent > 8 ? ", ..." : "") + ")"));
  }
  if (auto s = Finish(request, staging, parts, final_dir); !s) {
    if (auto newer = superseded()) return Ok(*newer);
    return s.error();
  }
  RemoveStaging(request.root, request.step);
  if (!request.tracker.empty()) {
    if (auto s = WriteTracker(request.root, request.tracker, request.step, request.run_started);
        !s) {
      return s.error().Wrap(final_dir + " is complete, but its tracker is not updated");
    }
  }
  if (!request.link.empty()) {
    if (auto s = LinkTo(request.link, final_dir); !s) {
      return s.error().Wrap(final_dir + " is complete, but " + request.link +
                            " does not point at it");
    }
  }
  return Ok(final_dir);
}

}  // namespace ftrun::launcher
