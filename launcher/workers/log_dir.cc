#include "launcher/workers/log_dir.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>

namespace fs = std::filesystem;

namespace ftrun::launcher {
namespace {

// Python's tempfile.mkdtemp: prefix + 8 characters from [a-z0-9_], mode 0700.
Result<std::string> MakeTempDir(const std::string& parent, const std::string& prefix) {
  static const char kChars[] = "abcdefghijklmnopqrstuvwxyz0123456789_";
  std::random_device rd;
  std::mt19937 gen(rd());
  std::uniform_int_distribution<size_t> pick(0, sizeof(kChars) - 2);
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::string name = prefix;
    for (int i = 0; i < 8; ++i) name += kChars[pick(gen)];
    std::string path = (fs::path(parent) / name).string();
    if (::mkdir(path.c_str(), 0700) == 0) return Ok(path);
    if (errno != EEXIST) {
      return Error{"cannot create log directory " + path + ": " + std::strerror(errno)};
    }
  }
  return Error{"cannot create a unique directory " + prefix + "* in " + parent};
}

}  // namespace

Result<RunLogDir> RunLogDir::Create(const std::string& log_dir, const std::string& run_id,
                                    const EnvMap& env) {
  RunLogDir d;
  if (log_dir == "/dev/null") {
    d.disabled_ = true;
    return d;
  }
  std::string base = log_dir;
  if (base.empty()) {
    std::string tmp = Lookup(env, "TMPDIR").value_or("/tmp");
    if (tmp.empty()) tmp = "/tmp";
    auto made = MakeTempDir(tmp, "torchelastic_");
    if (!made) return made.error();
    base = *made;
  } else {
    std::error_code ec;
    fs::create_directories(base, ec);
    if (ec) return Error{"--log-dir: cannot create " + base + ": " + ec.message()};
  }
  auto run = MakeTempDir(base, run_id + "_");
  if (!run) return run.error();
  d.run_dir_ = *run;
  return d;
}

Result<std::string> RunLogDir::PrepareAttempt(int restart_count, int nproc) {
  if (disabled_) return Ok(std::string());
  fs::path attempt = fs::path(run_dir_) / ("attempt_" + std::to_string(restart_count));
  std::error_code ec;
  if (fs::exists(attempt, ec)) {
    for (int k = 1;; ++k) {
      fs::path aside = attempt;
      aside += "." + std::to_string(k);
      if (!fs::exists(aside, ec)) {
        fs::rename(attempt, aside, ec);
        break;
      }
    }
    if (ec) return Error{"cannot move aside " + attempt.string() + ": " + ec.message()};
  }
  for (int r = 0; r < nproc; ++r) {
    fs::create_directories(attempt / std::to_string(r), ec);
    if (ec)
      return Error{"cannot create " + (attempt / std::to_string(r)).string() + ": " + ec.message()};
  }
  return Ok(attempt.string());
}

std::string RunLogDir::RankFile(const std::string& attempt_dir, int local_rank,
                                const std::string& file) {
  if (attempt_dir.empty()) return "";
  return (fs::path(attempt_dir) / std::to_string(local_rank) / file).string();
}

}  // namespace ftrun::launcher
