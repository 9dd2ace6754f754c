#include "launcher/checkpoint/checkpoint_io.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <set>
#include <span>

#include "common/log.h"
#include "launcher/checkpoint/earlier_run.h"
#include "launcher/checkpoint/torch_file.h"

namespace ftrun::launcher {
namespace checkpoint_io {
namespace {

namespace fs = std::filesystem;

constexpr size_t kChunk = size_t{8} << 20;  // bytes checksummed and written per call

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

std::string JsonFiles(const Files& files) {
  std::string out = "{";
  for (const auto& [name, f] : files) {
    if (out.size() > 1) out += ", ";
    out += Json(name) + ": {";
    if (f.crc32) out += "\"crc32\": " + std::to_string(*f.crc32) + ", ";
    if (f.crc32c) out += "\"crc32c\": " + std::to_string(*f.crc32c) + ", ";
    if (!f.sha256.empty()) out += "\"sha256\": " + Json(f.sha256) + ", ";
    out += "\"size\": " + std::to_string(f.size) + "}";
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

// What a file holds after its header: bytes saved in memory, the CRC-32C they had when saved
// (if known) and their name for errors.
struct Content {
  std::span<const std::byte> bytes;
  std::optional<uint32_t> recorded;
  std::string what;
};

// How long the persister waits for a snapshot's commit checksum: the checksummer computes it
// at 0.11 s per GiB, one snapshot after another.
constexpr auto kChecksumWait = std::chrono::seconds(60);

Content Contents(const CheckpointFile& file) {
  if (file.snapshot) {
    const SnapshotView& v = *file.snapshot;
    return {v.data(), v.meta.checksum.Wait(std::chrono::steady_clock::now() + kChecksumWait),
            "the snapshot of local rank " + std::to_string(v.local_rank) + " at step " +
                std::to_string(v.step)};
  }
  if (file.replica) {
    const ReplicaView& r = *file.replica;
    return {r.data(), r.crc32c,
            "the replica of " + r.group + " at step " + std::to_string(r.step) + " from " + r.from};
  }
  return {};
}

// A snapshot's bytes written as torch.save's files (torch_file.h), so that torch.load reads
// them: one file, or one per file of a snapshot of several (TorchArchives checks that their
// names are distinct and not empty, here that they are plain); other bytes, or a snapshot that
// cannot be converted (said at debug level: it is then written as it is, which ftrun's loaders
// read too), as they are: nullopt.
std::optional<std::vector<TorchFile>> AsTorchFiles(const Content& content) {
  if (content.bytes.empty()) return std::nullopt;
  auto torch = TorchArchives(content.bytes);
  if (torch && std::all_of(torch->begin(), torch->end(), [](const TorchFile& f) {
        return f.name.empty() || PlainFileName(f.name);
      })) {
    return std::move(*torch);
  }
  if (torch) torch = Error{"its file names are not plain"};
  if (content.bytes.size() >= 8 && std::memcmp(content.bytes.data(), "FTRUNSN1", 8) == 0) {
    LauncherLog()->debug("flash checkpoint: {} is written in its own format: {}", content.what,
                         torch.error().message);
  }
  return std::nullopt;
}

// Whether content's bytes still have the CRC-32C recorded when they were saved (of a
// snapshot written as torch.save's files: their parts reordered, their zip CRC-32s taken
// first, so checked once they are written, which covers every read of them).
Status StillAsSaved(const Content& content, uint32_t now, const std::string& path) {
  if (!content.recorded || now == *content.recorded) return {};
  return Error{content.what + " has checksum " + std::to_string(now) + ", not the " +
               std::to_string(*content.recorded) +
               " recorded when it was saved (changed in memory since): not persisted, writing " +
               path};
}

// Writes `header` then `archive`'s pieces, or else content's bytes as they are, into a new
// file at `path` and fsyncs it; the CRC-32 (and, for content's bytes as they are, the CRC-32C,
// which must be the one recorded when they were saved) of what was written go to `entry`.
// CRC-32, not a cryptographic digest: it finds torn and corrupted files (whoever can change a
// file can change its manifest too) at a quarter of SHA-256's cost, and zip has it already.
Status WriteNewFile(const std::string& path, const std::string& header, FileEntry* entry,
                    const Content& content = {}, const ZipArchive* archive = nullptr) {
  const bool as_is = archive == nullptr;
  std::vector<std::span<const std::byte>> pieces{Bytes(header)};
  if (as_is) {
    pieces.push_back(content.bytes);
  } else {
    pieces.insert(pieces.end(), archive->pieces().begin(), archive->pieces().end());
  }
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return Failed("creating", path);
  Status status;
  // The file's CRC-32: an archive knows it from its entries' (no pass over the data here).
  uLong file_crc = as_is ? 0 : archive->crc32();
  uint32_t crc = 0;  // CRC-32C of content's bytes as written (as_is)
  uint64_t size = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    for (auto data = pieces[i]; status && !data.empty();) {
      auto piece = data.first(std::min(data.size(), kChunk));
      if (as_is) {
        file_crc = crc32_z(file_crc, reinterpret_cast<const Bytef*>(piece.data()), piece.size());
      }
      if (as_is && i == 1) crc = SnapshotChecksum(piece, crc);
      status = WriteAll(fd, piece, path);
      size += piece.size();
      data = data.subspan(piece.size());
    }
  }
  if (status && as_is) status = StillAsSaved(content, crc, path);
  if (status && fsync(fd) != 0) status = Failed("fsync of", path);
  if (close(fd) != 0 && status) status = Failed("closing", path);
  if (status) {
    entry->crc32 = static_cast<uint32_t>(file_crc);
    entry->size = size;
    if (header.empty() && as_is) entry->crc32c = crc;
  }
  return status;
}

// Writes a part's file into `dir`: a snapshot as torch.save's file(s) (a snapshot of several
// files as one file per file, by their names), anything else as it is under its own name.
Status WriteFile(const std::string& dir, const CheckpointFile& file, Files* files) {
  const Content content = Contents(file);
  const auto archives = file.header.empty() ? AsTorchFiles(content) : std::nullopt;
  if (!archives) {
    const std::string path = dir + "/" + file.name;
    return WriteNewFile(path, file.header, &(*files)[file.name], content);
  }
  std::string last;
  for (const auto& [name, archive] : *archives) {
    const std::string& as = name.empty() ? file.name : name;
    last = dir + "/" + as;
    if (auto s = WriteNewFile(last, "", &(*files)[as], content, &archive); !s) return s;
  }
  return StillAsSaved(content, content.recorded ? SnapshotChecksum(content.bytes) : 0, last);
}

// checkpoint.py's _write_json: <path>.tmp, fsync, rename.
Status WriteJson(const std::string& path, const std::string& json) {
  std::string tmp = path + ".tmp";
  FileEntry unused;
  if (auto s = WriteNewFile(tmp, json + "\n", &unused); !s) return s;
  if (rename(tmp.c_str(), path.c_str()) != 0) return Failed("renaming to", path);
  return {};
}

std::string Now() {
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char text[64];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S%z", &local);
  return text;
}

}  // namespace

Error Failed(const std::string& doing, const std::string& path, int error) {
  return Error{doing + " " + path + ": " + std::strerror(error)};
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

std::string Json(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string PartEntry(const std::string& group, const Files& files) {
  return "{\"dir\": " + Json(PartDirName(group)) + ", \"files\": " + JsonFiles(files) + "}";
}

Status WriteManifest(const std::string& dir, uint64_t step, int world_size,
                     const std::string& reason, const std::map<std::string, std::string>& entries) {
  std::string json = "{\"created\": " + Json(Now()) + ", \"format\": 1, \"groups\": {";
  for (const auto& [group, entry] : entries) {
    if (json.back() != '{') json += ", ";
    json += Json(group) + ": " + entry;
  }
  json += "}, \"reason\": " + Json(reason) + ", \"step\": " + std::to_string(step) +
          ", \"world_size\": " + std::to_string(world_size) + "}";
  if (auto s = WriteJson(dir + "/MANIFEST.json", json); !s) return s;
  return FsyncPath(dir);
}

bool PlainFileName(const std::string& name) {
  return PrintableAscii(name) && !name.empty() && name != "." && name != ".." &&
         !name.starts_with("PART.json") && name.find('/') == std::string::npos;
}

Status CheckNames(const CheckpointRequest& request) {
  std::set<std::string> groups;
  if (request.parts.empty()) return Error{"a checkpoint needs at least one group"};
  for (const auto& part : request.parts) {
    if (!PrintableAscii(part.group) || !groups.insert(part.group).second) {
      return Error{"group name '" + part.group + "' is repeated or not printable ASCII"};
    }
    for (const auto& file : part.files) {
      if (!PlainFileName(file.name)) {
        return Error{"file name '" + file.name + "' of group '" + part.group +
                     "' is not a plain printable-ASCII name"};
      }
    }
  }
  return {};
}

Result<Files> WritePart(const std::string& tmp, const CheckpointPart& part, uint64_t step) {
  std::string dir = PartDirName(part.group);
  std::string path = tmp + "/" + dir;
  if (mkdir(path.c_str(), 0755) != 0) return Failed("creating", path);
  Files files;
  for (const auto& file : part.files) {
    if (auto s = WriteFile(path, file, &files); !s) return s.error();
  }
  std::string json = "{\"dir\": " + Json(dir) + ", \"files\": " + JsonFiles(files) +
                     ", \"group\": " + Json(part.group) + ", \"step\": " + std::to_string(step) +
                     "}";
  if (auto s = WriteJson(path + "/PART.json", json); !s) return s.error();
  if (auto s = FsyncPath(path); !s) return s.error();
  return files;
}

Status WriteTracker(const std::string& root, const std::string& name, uint64_t step,
                    WallTime run_started) {
  std::string path = root + "/" + name;
  // Read, compare and replace under one lock: two writers (agents of several nodes finishing
  // different steps) could otherwise both read the old step and the older one win.
  // The lock is on root itself: no lock file is left behind (engine.py locks the same).
  const std::string& lock_path = root;
  int lock = open(lock_path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (lock < 0) return Failed("opening", lock_path);
  while (flock(lock, LOCK_EX) != 0) {
    if (errno != EINTR) {
      Error error = Failed("locking", lock_path);
      close(lock);
      return error;
    }
  }
  Status status;
  std::ifstream in(path);
  // Signed: an unsigned read takes "-1" (which the Python side reads as no step) for 2^64-1,
  // and a tracker never lowered would then never name this run's steps.
  // Written as DLRover and Megatron-LM write it, without a newline: DLRover's FSDP loader joins
  // the content to the directory unstripped.
  long long recorded = -1;
  const bool this_run = !WrittenBefore(path, run_started);
  if (!(this_run && in >> recorded && recorded >= 0 && static_cast<uint64_t>(recorded) > step)) {
    std::string tmp = path + ".tmp-" + UniqueSuffix();
    FileEntry unused;
    status = WriteNewFile(tmp, std::to_string(step), &unused);
    if (!status) {
      unlink(tmp.c_str());
    } else if (rename(tmp.c_str(), path.c_str()) != 0) {
      status = Failed("renaming to", path);
    } else {
      status = FsyncPath(root);
    }
  }
  close(lock);  // releases the lock
  return status;
}

std::string UniqueSuffix() {
  static std::atomic<uint64_t> next{0};
  std::random_device random;  // per call: a forked process gets other bits than its parent
  return fmt::format("{}-{:08x}{:08x}-{}", getpid(), random(), random(), next.fetch_add(1));
}

}  // namespace checkpoint_io

std::string PartDirName(const std::string& group) {
  if (group.empty()) return "group-all";
  std::string safe;
  for (char c : group.substr(0, 64)) {
    bool keep = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                c == '_' || c == '.' || c == '-';
    safe += keep ? c : '_';
  }
  checkpoint_io::Digest sha1(EVP_sha1());
  sha1.Update(checkpoint_io::Bytes(group));
  return "group-" + safe + "-" + sha1.Hex().substr(0, 8);
}

}  // namespace ftrun::launcher
