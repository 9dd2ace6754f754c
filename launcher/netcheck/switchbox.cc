// Switchbox check: probe output parsing and the verdict. The runner is in switchbox_run.cc;
// --box-pairs parsing in launcher/config/switchbox_settings.cc.
#include "launcher/netcheck/switchbox.h"

#include <fmt/format.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <charconv>
#include <cmath>
#include <optional>
#include <set>

namespace ftrun::launcher {
namespace {

constexpr size_t kMaxGarbageQuote = 120;

std::string Quote(std::string line) {
  if (line.size() > kMaxGarbageQuote) line = line.substr(0, kMaxGarbageQuote) + "...";
  return "'" + line + "'";
}

}  // namespace

ParsedProbeOutput ParseProbeOutput(const std::string& stdout_text,
                                   const std::vector<BoxPair>& expected) {
  namespace pb = google::protobuf;
  ParsedProbeOutput out;
  std::vector<bool> seen(expected.size(), false);
  for (const auto& p : expected) out.pairs.push_back(BoxPairResult{p, false, 0, ""});
  size_t start = 0;
  while (start < stdout_text.size()) {
    size_t nl = stdout_text.find('\n', start);
    if (nl == std::string::npos) nl = stdout_text.size();
    std::string line = stdout_text.substr(start, nl - start);
    start = nl + 1;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;

    pb::Struct obj;
    bool good = pb::util::JsonStringToMessage(line, &obj).ok();
    const auto& f = obj.fields();
    auto pair_it = f.find("pair");
    std::optional<BoxPair> pair;
    if (good && pair_it != f.end() && pair_it->second.has_string_value()) {
      pair = ParseBoxPair(pair_it->second.string_value());
    }
    size_t idx = expected.size();
    for (size_t i = 0; pair && i < expected.size(); ++i) {
      if (expected[i] == *pair || (expected[i].a == pair->b && expected[i].b == pair->a)) idx = i;
    }
    auto err_it = f.find("error");
    auto bw_it = f.find("bandwidth_mbps");
    bool has_error = good && err_it != f.end() && err_it->second.has_string_value();
    bool has_bw = good && bw_it != f.end() &&
                  bw_it->second.kind_case() == pb::Value::kNumberValue &&
                  std::isfinite(bw_it->second.number_value()) && bw_it->second.number_value() >= 0;
    if (idx == expected.size() || seen[idx] || (!has_error && !has_bw)) {
      out.garbage.push_back(line);
      continue;
    }
    seen[idx] = true;
    BoxPairResult& r = out.pairs[idx];
    if (has_error) {
      r.reason = err_it->second.string_value();
      if (r.reason.empty()) r.reason = "the probe reported an error";
    } else {
      r.ok = true;
      r.mbps = bw_it->second.number_value();
    }
  }
  for (size_t i = 0; i < expected.size(); ++i) {
    if (seen[i]) continue;
    out.pairs[i].reason = "no result";
    if (!out.garbage.empty()) {
      out.pairs[i].reason += " (the probe printed " + Quote(out.garbage.front()) + ")";
    }
  }
  return out;
}

SwitchboxReport JudgeSwitchbox(std::vector<BoxPairResult> pairs, double min_bandwidth_mbps,
                               int min_channels) {
  SwitchboxReport r;
  r.pairs = std::move(pairs);
  r.min_bandwidth_mbps = min_bandwidth_mbps;
  r.min_channels = min_channels;
  for (const auto& p : r.pairs) r.passed += p.Passes(min_bandwidth_mbps) ? 1 : 0;
  r.node_ok = r.passed >= min_channels;
  return r;
}

std::string SwitchboxReport::Summary() const {
  std::string s = fmt::format("switchbox check {}: {} of {} GPU pairs reach {:g} MB/s (need {})",
                              node_ok ? "passed" : "failed", passed, pairs.size(),
                              min_bandwidth_mbps, min_channels);
  for (const auto& p : pairs) {
    if (p.ok) {
      s += fmt::format("; {} {:.1f} MB/s", p.pair.Name(), p.mbps);
    } else {
      s += fmt::format("; {} {}", p.pair.Name(), p.reason);
    }
  }
  return s;
}

}  // namespace ftrun::launcher
