#include "launcher/report/report_inputs.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace ftrun::launcher::report {
namespace fs = std::filesystem;
namespace {

constexpr const char* kEvents = "events.jsonl";
constexpr const char* kFaultRecord = "fault_record.json";

bool IsRunDir(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / kEvents, ec) || fs::is_regular_file(dir / kFaultRecord, ec);
}

// At most `limit` bytes of `path`; nullopt when it cannot be read.
std::optional<std::string> ReadBounded(const fs::path& path, size_t limit, bool* cut) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string text(limit, '\0');
  in.read(text.data(), static_cast<std::streamsize>(limit));
  text.resize(static_cast<size_t>(in.gcount()));
  *cut = in.peek() != EOF;
  return text;
}

void ReadStacks(const fs::path& dir, ReportInputs& in) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const std::string ext = e.path().extension().string();
    if (name.rfind("hang-", 0) == 0 && (ext == ".txt" || ext == ".svg") && e.is_regular_file(ec)) {
      files.push_back(e.path());
    }
  }
  std::sort(files.begin(), files.end());
  if (files.size() > kMaxStackFiles) {
    in.notes.push_back("only the first " + std::to_string(kMaxStackFiles) + " of " +
                       std::to_string(files.size()) + " stack files are shown");
    files.resize(kMaxStackFiles);
  }
  for (const auto& f : files) {
    bool cut = false;
    auto text = ReadBounded(f, kMaxSideFileBytes, &cut);
    if (!text) continue;
    if (cut) {
      in.notes.push_back(f.filename().string() + " is over " +
                         std::to_string(kMaxSideFileBytes >> 20) +
                         " MiB: " + (f.extension() == ".svg" ? "not shown" : "shown cut"));
      if (f.extension() == ".svg") continue;
    }
    (f.extension() == ".svg" ? in.stacks_svg : in.stacks_text)
        .push_back({f.filename().string(), std::move(*text)});
  }
}

}  // namespace

Result<ReportInputs> LoadReportInputs(const std::string& path, const std::string& event_log) {
  std::error_code ec;
  const fs::path given(path);
  if (!fs::exists(given, ec)) return Error{path + ": no such file or directory"};
  ReportInputs in;
  if (!event_log.empty()) {
    if (!fs::is_regular_file(event_log, ec)) return Error{event_log + ": no such event log"};
    in.event_log_path = event_log;
  }
  fs::path dir = given;
  if (fs::is_regular_file(given, ec)) {
    in.event_log_path = given.string();
    dir = given.has_parent_path() ? given.parent_path() : fs::path(".");
  } else if (!fs::is_directory(given, ec)) {
    return Error{path + ": neither a log directory nor an event log"};
  } else if (!IsRunDir(given) && event_log.empty()) {
    // A --log-dir holding one directory per run: the newest run.
    std::vector<fs::path> runs;
    for (const auto& e : fs::directory_iterator(given, ec)) {
      if (e.is_directory(ec) && IsRunDir(e.path())) runs.push_back(e.path());
    }
    if (runs.empty()) {
      return Error{path + ": no " + kEvents + " or " + kFaultRecord +
                   " here or in a run directory below it: not the log directory of an ftrun job "
                   "(or the job ran with --log-dir /dev/null, or has not started)"};
    }
    auto mtime = [](const fs::path& p) {
      std::error_code e;
      return fs::last_write_time(p, e);
    };
    std::sort(runs.begin(), runs.end(),
              [&](const auto& a, const auto& b) { return mtime(a) < mtime(b); });
    dir = runs.back();
    if (runs.size() > 1) {
      in.notes.push_back("the newest of " + std::to_string(runs.size()) + " runs in " + path +
                         ": " + dir.filename().string());
    }
  }
  in.run_dir = dir.string();
  if (in.event_log_path.empty() && fs::is_regular_file(dir / kEvents, ec)) {
    in.event_log_path = (dir / kEvents).string();
  }
  if (!in.event_log_path.empty()) {
    auto read = ReadEventLog(in.event_log_path);
    if (!read) return read.error();
    in.events = std::move(*read);
  }
  if (fs::is_regular_file(dir / kFaultRecord, ec)) {
    bool cut = false;
    in.fault_record = ReadBounded(dir / kFaultRecord, kMaxSideFileBytes, &cut);
    if (cut) in.notes.push_back(std::string(kFaultRecord) + " is cut at 4 MiB");
  }
  ReadStacks(dir / "stacks", in);
  return in;
}

bool HadFaults(const EventLogRead& log) {
  for (const auto& r : log.records) {
    if (r.event == "fault_detected" || r.event == "fault_reported" || r.event == "restart" ||
        r.event == "node_lost" || r.event == "node_excluded" ||
        (r.event == "job_finished" && r.Text("outcome") == "failed")) {
      return true;
    }
  }
  return false;
}

}  // namespace ftrun::launcher::report
