#include "launcher/workers/failure_report.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/signals.h"

namespace ftrun::launcher {
namespace {

namespace pb = google::protobuf;

constexpr const char* kNotAvailable = "<N/A>";

std::string ReplaceAll(std::string s, const std::string& from, const std::string& to) {
  for (size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size()) {
    s.replace(pos, from.size(), to);
  }
  return s;
}

const pb::Value* Field(const pb::Struct& s, const std::string& key) {
  auto it = s.fields().find(key);
  return it == s.fields().end() ? nullptr : &it->second;
}

std::optional<int64_t> AsTimestamp(const pb::Value* v) {
  if (v == nullptr) return std::nullopt;
  if (v->has_number_value()) return static_cast<int64_t>(v->number_value());
  if (v->has_string_value()) {
    try {
      return std::stoll(v->string_value());
    } catch (...) {
      return std::nullopt;
    }
  }
  return std::nullopt;
}

// torchrun's ProcessFailure._get_error_data + ChildFailedError._format_failure.
void ReadErrorFile(const std::string& path, WorkerFailure& f) {
  std::ifstream in(path);
  std::stringstream buf;
  buf << in.rdbuf();
  pb::Struct root;
  auto status = pb::util::JsonStringToMessage(buf.str(), &root);
  if (!in || !status.ok()) {
    f.message = "error file " + path + " could not be parsed: " + std::string(status.message());
    return;
  }
  f.error_json = buf.str();
  const pb::Value* msg = Field(root, "message");
  if (msg != nullptr && msg->has_string_value()) {
    f.message = msg->string_value();
    if (auto ts = AsTimestamp(Field(root, "timestamp"))) f.timestamp = *ts;
    return;
  }
  if (msg == nullptr || !msg->has_struct_value()) {
    f.message = kNotAvailable;
    return;
  }
  const pb::Struct& m = msg->struct_value();
  const pb::Value* text = Field(m, "message");
  f.message = text && text->has_string_value() ? text->string_value() : kNotAvailable;
  if (const pb::Value* extra = Field(m, "extraInfo"); extra && extra->has_struct_value()) {
    if (const pb::Value* cs = Field(extra->struct_value(), "py_callstack");
        cs && cs->has_string_value()) {
      f.message = cs->string_value();
    }
    if (auto ts = AsTimestamp(Field(extra->struct_value(), "timestamp"))) f.timestamp = *ts;
  }
}

std::string FormatOne(size_t idx, const WorkerFailure& f, size_t& width) {
  std::ostringstream out;
  out << "[" << idx << "]:\n"
      << "  time      : " << IsoTimestamp(f.timestamp) << "\n"
      << "  host      : " << f.host << "\n"
      << "  rank      : " << f.rank << " (local_rank: " << f.local_rank << ")\n"
      << "  exitcode  : " << f.exitcode << " (pid: " << f.pid << ")\n"
      << "  error_file: " << f.error_file << "\n"
      << "  traceback : " << ReplaceAll(f.message, "\n", "\n  ");
  std::string text = out.str();
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) width = std::max(width, line.size());
  return text;
}

}  // namespace

std::string IsoTimestamp(int64_t seconds) {
  std::time_t t = static_cast<std::time_t>(seconds);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d_%H:%M:%S", &tm);
  return buf;
}

WorkerFailure DescribeFailure(int local_rank, int rank, pid_t pid, const ExitStatus& status,
                              const std::string& error_file, const std::string& host,
                              int64_t now_seconds) {
  WorkerFailure f;
  f.local_rank = local_rank;
  f.rank = rank;
  f.pid = pid;
  f.exitcode = status.TorchExitCode();
  f.host = host;
  f.timestamp = now_seconds;
  std::error_code ec;
  if (!error_file.empty() && std::filesystem::is_regular_file(error_file, ec)) {
    f.error_file = error_file;
    ReadErrorFile(error_file, f);
  } else {
    f.error_file = kNotAvailable;
  }
  if (f.message.empty()) {
    if (status.signal != 0) {
      f.message = "Signal " + std::to_string(status.signal) + " (" + SignalName(status.signal) +
                  ") received by PID " + std::to_string(pid);
    } else {
      f.message = "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html";
    }
  }
  return f;
}

size_t RootCauseIndex(const std::vector<WorkerFailure>& failures) {
  size_t best = 0;
  for (size_t i = 1; i < failures.size(); ++i) {
    if (failures[i].timestamp < failures[best].timestamp) best = i;
  }
  return best;
}

std::string FormatFailureSummary(const std::string& name,
                                 const std::vector<WorkerFailure>& failures) {
  std::string title = name + " FAILED";
  size_t root = RootCauseIndex(failures);
  size_t width = title.size();
  std::string root_text;
  std::vector<std::string> others;
  for (size_t i = 0; i < failures.size(); ++i) {
    std::string text = FormatOne(i, failures[i], width);
    if (i == root) {
      root_text = text;
    } else {
      others.push_back(text);
    }
  }
  width = std::min<size_t>(width, 60);
  std::string border(width, '='), section(width, '-');
  std::ostringstream out;
  out << "\n" << border << "\n" << title << "\n" << section << "\nFailures:\n";
  if (others.empty()) out << "  <NO_OTHER_FAILURES>\n";
  for (const auto& o : others) out << o << "\n";
  out << section << "\nRoot Cause (first observed failure):\n" << root_text << "\n" << border;
  return out.str();
}

Status WriteAgentErrorFile(const std::string& path, const WorkerFailure& root) {
  if (root.error_json.empty()) return {};  // torchrun copies only a real child error file
  pb::Struct data;
  if (!pb::util::JsonStringToMessage(root.error_json, &data).ok()) return {};
  auto* fields = data.mutable_fields();
  auto it = fields->find("message");
  if (root.exitcode != 0 && it != fields->end() && it->second.has_struct_value()) {
    (*it->second.mutable_struct_value()->mutable_fields())["errorCode"].set_number_value(
        root.exitcode);
  }
  std::string json;
  if (!pb::util::MessageToJsonString(data, &json).ok()) {
    return Error{"cannot serialise the error file for " + path};
  }
  std::error_code ec;
  std::filesystem::remove(path, ec);
  std::ofstream out(path, std::ios::trunc);
  out << json;
  out.close();
  if (!out) return Error{"cannot write the agent error file " + path};
  return {};
}

}  // namespace ftrun::launcher
