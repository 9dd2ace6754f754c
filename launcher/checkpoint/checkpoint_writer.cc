#include "launcher/checkpoint/checkpoint_writer.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <span>

#include "common/log.h"

namespace ftrun::launcher {
namespace {

namespace fs = std::filesystem;

constexpr size_t kChunk = size_t{8} << 20;  // bytes hashed and written per call

Error Failed(const std::string& doing, const std::string& path, int error = errno) {
  return Error{doing + " " + path + ": " + std::strerror(error)};
}

// Lower-case hex digest of an OpenSSL message digest, fed in pieces.
class Digest {
 public:
  explicit Digest(const EVP_MD* md) : ctx_(EVP_MD_CTX_new(), EVP_MD_CTX_free) {
    EVP_DigestInit_ex(ctx_.get(), md, nullptr);
  }
  void Update(std::span<const std::byte> data) {
    EVP_DigestUpdate(ctx_.get(), data.data(), data.size());
  }
  std::string Hex() {
    unsigned char out[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    EVP_DigestFinal_ex(ctx_.get(), out, &n);
    std::string hex;
    char byte[3];
    for (unsigned int i = 0; i < n; ++i) {
      std::snprintf(byte, sizeof byte, "%02x", out[i]);
      hex += byte;
    }
    return hex;
  }

 private:
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx_;
};

std::span<const std::byte> Bytes(const std::string& s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

bool PrintableAscii(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
}

// A JSON string literal of printable ASCII.
std::string Json(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

struct FileEntry {
  uint64_t size = 0;
  std::string sha256;
};
using Files = std::map<std::string, FileEntry>;  // sorted, as json.dump(sort_keys=True)

std::string Json(const Files& files) {
  std::string out = "{";
  for (const auto& [name, f] : files) {
    if (out.size() > 1) out += ", ";
    out += Json(name) + ": {\"sha256\": " + Json(f.sha256) +
           ", \"size\": " + std::to_string(f.size) + "}";
  }
  return out + "}";
}

Status WriteAll(int fd, std::span<const std::byte> data, const std::string& path) {
  while (!data.empty()) {
    ssize_t n = write(fd, data.data(), std::min(data.size(), kChunk));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Failed("writing", path);
    data = data.subspan(static_cast<size_t>(n));
  }
  return {};
}

Status FsyncPath(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Failed("opening", path);
  int rc = fsync(fd);
  int error = errno;
  close(fd);
  if (rc != 0) return Failed("fsync of", path, error);
  return {};
}

// Writes `header` then the snapshot's bytes into a new file at `path` and fsyncs it; the
// sha256 of what was written goes to `sha256`. The crc32 of the snapshot bytes written must
// be the one its worker recorded.
Status WriteNewFile(const std::string& path, const std::string& header,
                    const SnapshotView* snapshot, std::string* sha256) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return Failed("creating", path);
  Digest digest(EVP_sha256());
  auto write_piece = [&](std::span<const std::byte> piece) -> Status {
    digest.Update(piece);
    return WriteAll(fd, piece, path);
  };
  Status status = write_piece(Bytes(header));
  if (status && snapshot != nullptr) {
    uint32_t crc = 0;
    for (auto data = snapshot->data(); status && !data.empty();) {
      auto piece = data.first(std::min(data.size(), kChunk));
      crc = SnapshotChecksum(piece, crc);
      status = write_piece(piece);
      data = data.subspan(piece.size());
    }
    if (status) {
      if (auto same = ChecksumMatches(*snapshot, crc); !same)
        status = same.error().Wrap("writing " + path);
    }
  }
  if (status && fsync(fd) != 0) status = Failed("fsync of", path);
  if (close(fd) != 0 && status) status = Failed("closing", path);
  if (status) *sha256 = digest.Hex();
  return status;
}

// checkpoint.py's _write_json: <path>.tmp, fsync, rename.
Status WriteJson(const std::string& path, const std::string& json) {
  std::string tmp = path + ".tmp";
  std::string unused;
  if (auto s = WriteNewFile(tmp, json + "\n", nullptr, &unused); !s) return s;
  if (rename(tmp.c_str(), path.c_str()) != 0) return Failed("renaming to", path);
  return {};
}

Status CheckNames(const CheckpointRequest& request) {
  std::set<std::string> groups;
  if (request.parts.empty()) return Error{"a checkpoint needs at least one group"};
  for (const auto& part : request.parts) {
    if (!PrintableAscii(part.group) || !groups.insert(part.group).second) {
      return Error{"group name '" + part.group + "' is repeated or not printable ASCII"};
    }
    for (const auto& file : part.files) {
      if (!PrintableAscii(file.name) || file.name.empty() || file.name == "." ||
          file.name == ".." || file.name == "PART.json" ||
          file.name.find('/') != std::string::npos) {
        return Error{"file name '" + file.name + "' of group '" + part.group +
                     "' is not a plain printable-ASCII name"};
      }
    }
  }
  return {};
}

// checkpoint.py's write_part for files already in memory: the group's files, then PART.json.
Result<Files> WritePart(const std::string& tmp, const CheckpointPart& part, uint64_t step) {
  std::string dir = PartDirName(part.group);
  std::string path = tmp + "/" + dir;
  if (mkdir(path.c_str(), 0755) != 0) return Failed("creating", path);
  Files files;
  for (const auto& file : part.files) {
    std::string file_path = path + "/" + file.name;
    FileEntry& entry = files[file.name];
    const SnapshotView* snapshot = file.snapshot ? &*file.snapshot : nullptr;
    if (auto s = WriteNewFile(file_path, file.header, snapshot, &entry.sha256); !s) {
      return s.error();
    }
    entry.size = file.header.size() + (snapshot != nullptr ? snapshot->bytes : 0);
  }
  std::string json = "{\"dir\": " + Json(dir) + ", \"files\": " + Json(files) +
                     ", \"group\": " + Json(part.group) + ", \"step\": " + std::to_string(step) +
                     "}";
  if (auto s = WriteJson(path + "/PART.json", json); !s) return s.error();
  if (auto s = FsyncPath(path); !s) return s.error();
  return files;
}

std::string Now() {
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char text[64];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S%z", &local);
  return text;
}

// The parts and the manifest inside the temporary directory `tmp`.
Status WriteContents(const std::string& tmp, const CheckpointRequest& request) {
  std::map<std::string, std::string> groups;  // group -> its manifest entry
  for (const auto& part : request.parts) {
    auto files = WritePart(tmp, part, request.step);
    if (!files) return files.error();
    groups[part.group] =
        "{\"dir\": " + Json(PartDirName(part.group)) + ", \"files\": " + Json(*files) + "}";
  }
  std::string json = "{\"created\": " + Json(Now()) + ", \"format\": 1, \"groups\": {";
  for (const auto& [group, entry] : groups) {
    if (json.back() != '{') json += ", ";
    json += Json(group) + ": " + entry;
  }
  json += "}, \"reason\": " + Json(request.reason) + ", \"step\": " + std::to_string(request.step) +
          ", \"world_size\": " + std::to_string(request.world_size) + "}";
  if (auto s = WriteJson(tmp + "/MANIFEST.json", json); !s) return s;
  return FsyncPath(tmp);
}

// The newest step recorded in the tracker, never lowered (an older step persisted late does
// not hide a newer one), written as engine.py's _write_tracker does.
Status WriteTracker(const std::string& root, const std::string& name, uint64_t step) {
  std::string path = root + "/" + name;
  std::ifstream in(path);
  unsigned long long recorded = 0;
  if (in >> recorded && recorded > step) return {};
  std::string tmp = path + ".tmp-" + std::to_string(getpid());
  std::string unused;
  if (auto s = WriteNewFile(tmp, std::to_string(step) + "\n", nullptr, &unused); !s) {
    unlink(tmp.c_str());
    return s;
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) return Failed("renaming to", path);
  return FsyncPath(root);
}

// Points `link` at `target` atomically (a relative symbolic link, as engine.py's _link). A
// real file or directory already at `link` is left alone, with a warning.
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
  std::string tmp = (where.parent_path() /
                     ("." + where.filename().string() + ".link-" + std::to_string(getpid())))
                        .string();
  unlink(tmp.c_str());
  if (symlink(relative.c_str(), tmp.c_str()) != 0) return Failed("linking", tmp);
  if (rename(tmp.c_str(), where.c_str()) != 0) {
    unlink(tmp.c_str());
    return Failed("renaming to", where.string());
  }
  return {};
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

std::string PartDirName(const std::string& group) {
  if (group.empty()) return "group-all";
  std::string safe;
  for (char c : group.substr(0, 64)) {
    bool keep = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                c == '_' || c == '.' || c == '-';
    safe += keep ? c : '_';
  }
  Digest sha1(EVP_sha1());
  sha1.Update(Bytes(group));
  return "group-" + safe + "-" + sha1.Hex().substr(0, 8);
}

Result<std::string> WriteCheckpoint(const CheckpointRequest& request) {
  if (auto s = CheckNames(request); !s) return s.error().Wrap("checkpoint under " + request.root);
  std::error_code ec;
  fs::create_directories(request.root, ec);
  if (ec) return Error{"creating " + request.root + ": " + ec.message()};
  std::string step = std::to_string(request.step);
  std::string tmp = request.root + "/.ftrun-step-" + step + ".tmp-" + std::to_string(getpid()) +
                    "-" +
                    std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
  std::string final_dir = request.root + "/ftrun-step-" + step;
  if (mkdir(tmp.c_str(), 0755) != 0) return Failed("creating", tmp);
  Status written = WriteContents(tmp, request);
  if (written && fs::exists(final_dir, ec)) {
    LauncherLog()->info("checkpoint {} already exists: kept as it is", final_dir);
    fs::remove_all(tmp, ec);
  } else if (written && rename(tmp.c_str(), final_dir.c_str()) != 0) {
    written = Failed("renaming into place", final_dir);
  } else if (written) {
    written = FsyncPath(request.root);
  }
  if (!written) {
    fs::remove_all(tmp, ec);
    return written.error();
  }
  if (!request.tracker.empty()) {
    if (auto s = WriteTracker(request.root, request.tracker, request.step); !s) {
      return s.error().Wrap(final_dir + " is complete, but its tracker is not updated");
    }
  }
  if (!request.link.empty()) {
    if (auto s = LinkTo(request.link, LinkTarget(request, final_dir)); !s) {
      return s.error().Wrap(final_dir + " is complete, but " + request.link +
                            " does not point at it");
    }
  }
  return Ok(final_dir);
}

}  // namespace ftrun::launcher
