#include "launcher/config/switchbox_settings.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <optional>
#include <string_view>

#include "launcher/config/launch_config.h"

namespace ftrun::launcher {
namespace {

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

}  // namespace

std::optional<BoxPair> ParseBoxPair(std::string_view tok) {
  size_t colon = tok.find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  auto a = ParseId(tok.substr(0, colon));
  auto b = ParseId(tok.substr(colon + 1));
  if (!a || !b) return std::nullopt;
  return BoxPair{*a, *b};
}

std::string BoxPair::Name() const { return fmt::format("{}:{}", a, b); }

Result<std::vector<BoxPair>> ParseBoxPairs(const std::string& text) {
  std::vector<BoxPair> pairs;
  for (const auto& tok : Tokens(text)) {
    auto p = ParseBoxPair(tok);
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

}  // namespace ftrun::launcher
