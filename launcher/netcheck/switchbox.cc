// Switchbox check: --box-pairs parsing, probe output parsing and the verdict. The runner is in
// switchbox_run.cc.
#include "launcher/netcheck/switchbox.h"

#include <fmt/format.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <charconv>
#include <cmath>
#include <optional>
#include <set>

#include "launcher/config/launch_config.h"

namespace ftrun::launcher {
namespace {

constexpr size_t kMaxGarbageQuote = 120;

std::optional<int> ParseId(std::string_view s) {
  int v = -1;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || v < 0) return std::nullopt;
  return v;
}

std::vector<std::string> Tokens(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : text) {
    if (c == ' ' || c == ',' || c == '\t' || c == '\n') {
      if (!cur.empty()) out.push_back(std::move(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

// "A:B" as a pair, or nullopt; the range is the caller's business.
std::optional<BoxPair> ParseToken(std::string_view tok) {
  size_t colon = tok.find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  auto a = ParseId(tok.substr(0, colon));
  auto b = ParseId(tok.substr(colon + 1));
  if (!a || !b) return std::nullopt;
  return BoxPair{*a, *b};
}

std::string Quote(std::string line) {
  if (line.size() > kMaxGarbageQuote) line = line.substr(0, kMaxGarbageQuote) + "...";
  return "'" + line + "'";
}

}  // namespace

std::string BoxPair::Name() const { return fmt::format("{}:{}", a, b); }

Result<std::vector<BoxPair>> ParseBoxPairs(const std::string& text) {
  std::vector<BoxPair> pairs;
  for (const auto& tok : Tokens(text)) {
    auto p = ParseToken(tok);
    if (!p) return Error{fmt::format("--box-pairs: bad pair \"{}\" (expected A:B)", tok)};
    for (int id : {p->a, p->b}) {
      if (id > kMaxBoxGpuId) {
        return Error{fmt::format("--box-pairs: GPU {} in \"{}\" is out of range (0-{})", id, tok,
                                 kMaxBoxGpuId)};
      }
    }
    if (p->a == p->b) {
      return Error{fmt::format("--box-pairs: pair \"{}\" joins GPU {} to itself", tok, p->a)};
    }
    for (const auto& q : pairs) {
      if (q == *p || (q.a == p->b && q.b == p->a)) {
        return Error{fmt::format("--box-pairs: pair \"{}\" is given twice", tok)};
      }
    }
    pairs.push_back(*p);
  }
  if (pairs.empty()) return Error{"--box-pairs: no GPU pair given (expected e.g. \"0:1 2:4\")"};
  return pairs;
}

Result<std::vector<BoxPair>> ParseBoxPairs(const std::vector<std::string>& tokens) {
  std::string joined;
  for (const auto& t : tokens) joined += (joined.empty() ? "" : " ") + t;
  return ParseBoxPairs(joined);
}

Status CheckSwitchboxSettings(const std::vector<BoxPair>& pairs, double min_bandwidth_mbps,
                              int min_channels) {
  if (!(min_bandwidth_mbps > 0) || !std::isfinite(min_bandwidth_mbps)) {
    return Error{fmt::format("--min-bandwidth: needs a positive number of MB/s, got {}",
                             min_bandwidth_mbps)};
  }
  if (min_channels < 1 || static_cast<size_t>(min_channels) > pairs.size()) {
    return Error{fmt::format("--min-channels: needs 1 to {} (the number of --box-pairs), got {}",
                             pairs.size(), min_channels)};
  }
  return {};
}

Result<int> CheckSwitchboxGpus(const EnvMap& env, const std::vector<BoxPair>& pairs,
                               const std::string& nvidia_proc_dir) {
  HostFacts host = DetectHostFacts(env, nvidia_proc_dir);
  if (host.gpu_count == 0) {
    return Error{"--switchbox-check: this node has no GPU (nothing in " + host.gpu_source +
                 ", or CUDA_VISIBLE_DEVICES hides them all)"};
  }
  for (const auto& p : pairs) {
    for (int id : {p.a, p.b}) {
      if (id >= host.gpu_count) {
        return Error{
            fmt::format("--box-pairs: GPU {} in \"{}\" is out of range: this node has {} "
                        "GPU(s), 0-{}",
                        id, p.Name(), host.gpu_count, host.gpu_count - 1)};
      }
    }
  }
  return host.gpu_count;
}

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
      pair = ParseToken(pair_it->second.string_value());
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
