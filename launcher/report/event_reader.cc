#include "launcher/report/event_reader.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fstream>

#include "common/event_log.h"

namespace ftrun::launcher::report {
namespace {

// The records are flat; a deep line is refused before protobuf's parser (quadratic in depth)
// sees it.
constexpr int kMaxDepth = 16;

bool TooDeep(const std::string& line) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (in_string) {
      if (c == '\\') ++i;
      if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxDepth) return true;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return false;
}

std::string ValueText(const google::protobuf::Value& v) {
  using K = google::protobuf::Value::KindCase;
  switch (v.kind_case()) {
    case K::kStringValue:
      return v.string_value();
    case K::kNumberValue: {
      const double d = v.number_value();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) {
        return std::to_string(static_cast<int64_t>(d));
      }
      return std::to_string(d);
    }
    case K::kBoolValue:
      return v.bool_value() ? "true" : "false";
    case K::kListValue: {
      std::string out;
      for (const auto& item : v.list_value().values()) {
        out += (out.empty() ? "" : ",") + ValueText(item);
      }
      return out;
    }
    case K::kStructValue:
      return "{...}";
    default:
      return "";
  }
}

}  // namespace

std::string EventRecord::Text(const std::string& key, const std::string& fallback) const {
  auto it = fields.find(key);
  return it == fields.end() ? fallback : it->second;
}

std::optional<int64_t> EventRecord::Int(const std::string& key) const {
  auto it = fields.find(key);
  if (it == fields.end()) return std::nullopt;
  int64_t v = 0;
  const char* end = it->second.data() + it->second.size();
  auto [p, ec] = std::from_chars(it->second.data(), end, v);
  if (ec != std::errc() || p != end) return std::nullopt;
  return v;
}

std::optional<int64_t> ParseIsoTimeMs(const std::string& text) {
  std::tm tm{};
  const char* rest = ::strptime(text.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (!rest) return std::nullopt;
  int ms = 0;
  if (*rest == '.') {
    ++rest;
    int digits = 0;
    while (*rest >= '0' && *rest <= '9') {
      if (digits < 3) ms = ms * 10 + (*rest - '0');
      ++digits;
      ++rest;
    }
    for (; digits < 3; ++digits) ms *= 10;
  }
  if (*rest != 'Z' || rest[1] != '\0') return std::nullopt;
  const time_t secs = ::timegm(&tm);
  if (secs < 0) return std::nullopt;
  return static_cast<int64_t>(secs) * 1000 + ms;
}

std::optional<EventRecord> ParseEventLine(const std::string& line, int64_t* schema) {
  if (line.empty() || line.front() != '{' || TooDeep(line)) return std::nullopt;
  google::protobuf::Struct object;
  if (!google::protobuf::util::JsonStringToMessage(line, &object).ok()) return std::nullopt;
  EventRecord r;
  for (const auto& [key, value] : object.fields()) {
    if (key == "event") {
      r.event = ValueText(value);
    } else if (key == "time") {
      r.time_ms = ParseIsoTimeMs(ValueText(value)).value_or(0);
    } else if (key == "node") {
      r.node = ValueText(value);
    } else if (key == "round" && value.has_number_value()) {
      r.round = static_cast<int64_t>(value.number_value());
    } else if (key == "schema" && value.has_number_value()) {
      if (schema) *schema = static_cast<int64_t>(value.number_value());
    } else {
      r.fields[key] = ValueText(value).substr(0, 4096);
    }
  }
  if (r.event.empty()) return std::nullopt;
  return r;
}

Result<EventLogRead> ReadEventLog(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{"cannot read the event log " + path + ": " + std::strerror(errno)};
  EventLogRead out;
  std::string line;
  size_t read = 0;
  char buf[1 << 16];
  bool overlong = false;  // the current line passed kMaxRecordBytes: dropped to its end
  auto finish_line = [&](bool complete) {
    if (!complete && line.empty() && !overlong) return;
    ++out.lines;
    overlong = overlong || line.size() > kMaxRecordBytes;
    if (overlong) {
      ++out.too_long;
    } else if (!complete) {
      out.partial_last_line = true;
    } else if (out.records.size() >= kMaxRecords) {
      out.cut_off = true;
    } else {
      int64_t schema = -1;
      auto record = ParseEventLine(line, &schema);
      if (!record) {
        ++out.not_json;
      } else if (schema != kEventLogSchema) {
        ++out.other_schema;
        out.other_schema_seen = schema;
      } else {
        out.records.push_back(std::move(*record));
      }
    }
    line.clear();
    overlong = false;
  };
  while (in && read < kMaxEventBytes) {
    in.read(buf, sizeof buf);
    const size_t n = static_cast<size_t>(in.gcount());
    if (n == 0) break;
    read += n;
    size_t start = 0;
    for (size_t i = 0; i < n; ++i) {
      if (buf[i] != '\n') continue;
      if (!overlong) line.append(buf + start, i - start);
      finish_line(true);
      start = i + 1;
    }
    if (!overlong) {
      line.append(buf + start, n - start);
      if (line.size() > kMaxRecordBytes) {
        overlong = true;
        line.clear();
        line.shrink_to_fit();
      }
    }
  }
  if (read >= kMaxEventBytes && in.peek() != EOF) out.cut_off = true;
  finish_line(false);
  return out;
}

}  // namespace ftrun::launcher::report
