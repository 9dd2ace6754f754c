#include "rendezvous/rendezvous_conf.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>

namespace ftrun::rendezvous {
namespace {

std::string Trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

}  // namespace

std::optional<Error> CheckMaxSeconds(const std::string& what, double seconds) {
  if (seconds <= kMaxSeconds) return std::nullopt;
  return Error{what + ": " + fmt::format("{:g}", seconds) +
               " seconds is more than ftrun accepts (at most 1e9 s, about 31 years)"};
}

namespace {

Result<Seconds> ParseSeconds(const std::string& key, const std::string& value) {
  char* end = nullptr;
  double v = std::strtod(value.c_str(), &end);
  if (end == value.c_str() || *end != '\0' || !std::isfinite(v) || v <= 0) {
    return Error{"--rdzv-conf: key '" + key + "' needs a positive number of seconds, got '" +
                 value + "'"};
  }
  if (auto e = CheckMaxSeconds("--rdzv-conf: key '" + key + "'", v)) return *e;
  return Seconds(v);
}

Result<int> ParseInt(const std::string& key, const std::string& value, int min) {
  int v = 0;
  auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || ptr != value.data() + value.size() || v < min) {
    return Error{"--rdzv-conf: key '" + key + "' needs an integer >= " + std::to_string(min) +
                 ", got '" + value + "'"};
  }
  return v;
}

}  // namespace

std::optional<bool> ParseBool(std::string_view text) {
  std::string t(text);
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
  if (t == "1" || t == "true" || t == "t" || t == "yes" || t == "y") return true;
  if (t == "0" || t == "false" || t == "f" || t == "no" || t == "n") return false;
  return std::nullopt;
}

Result<std::map<std::string, std::string>> SplitRendezvousConf(std::string_view text) {
  std::map<std::string, std::string> out;
  if (Trim(text).empty()) return out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string_view pair = text.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    size_t eq = pair.find('=');
    if (Trim(pair).empty()) {
      return Error{"--rdzv-conf: '" + std::string(text) + "' has an empty key (stray ',')"};
    }
    if (eq == std::string_view::npos) {
      return Error{"--rdzv-conf: '" + std::string(pair) + "' is not of the form key=value"};
    }
    std::string key = Trim(pair.substr(0, eq));
    std::string value = Trim(pair.substr(eq + 1));
    if (key.empty()) return Error{"--rdzv-conf: '" + std::string(pair) + "' has an empty key"};
    if (value.empty()) {
      return Error{"--rdzv-conf: key '" + key + "' has an empty value"};
    }
    out[key] = value;
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

Result<RendezvousConf> ParseRendezvousConf(std::string_view text) {
  auto pairs = SplitRendezvousConf(text);
  if (!pairs) return pairs.error();
  RendezvousConf conf;
  const std::map<std::string, Seconds RendezvousConf::*> durations = {
      {"timeout", &RendezvousConf::timeout},
      {"join_timeout", &RendezvousConf::join_timeout},
      {"last_call_timeout", &RendezvousConf::last_call_timeout},
      {"lastcall_timeout", &RendezvousConf::last_call_timeout},  // DLRover's spelling
      {"close_timeout", &RendezvousConf::close_timeout},
      {"heartbeat_timeout", &RendezvousConf::heartbeat_timeout},
      {"keep_alive_interval", &RendezvousConf::keep_alive_interval},
      {"read_timeout", &RendezvousConf::read_timeout},
  };
  for (const auto& [key, value] : *pairs) {
    if (auto d = durations.find(key); d != durations.end()) {
      auto s = ParseSeconds(key, value);
      if (!s) return s.error();
      conf.*(d->second) = *s;
    } else if (key == "protocol" || key == "cacert" || key == "cert" || key == "key" ||
               key == "etcd_prefix" || key == "lease_ttl" || key == "user" ||
               key == "password_file" || key == "ca_cert" || key == "ssl_cert" ||
               key == "ssl_cert_key") {
      conf.etcd[key] = value;
    } else if (key == "keep_alive_max_attempt") {
      auto n = ParseInt(key, value, 1);
      if (!n) return n.error();
      conf.keep_alive_max_attempt = *n;
    } else if (key == "max_watches_per_peer") {
      auto n = ParseInt(key, value, 1);
      if (!n) return n.error();
      conf.max_watches_per_peer = *n;
    } else if (key == "rank") {
      auto n = ParseInt(key, value, 0);
      if (!n) return n.error();
      conf.rank = *n;
    } else if (key == "is_host") {
      conf.is_host = ParseBool(value);
      if (!conf.is_host) {
        return Error{"--rdzv-conf: key 'is_host' needs a boolean (1/0, true/false), got '" + value +
                     "'"};
      }
    } else if (key == "store_type") {
      if (value != "tcp" && value != "TCP") {
        return Error{"--rdzv-conf: store_type '" + value +
                     "' is not supported (ftrun runs its own rendezvous server; use tcp)"};
      }
    } else if (key == "local_addr") {
      conf.local_addr = value;
    } else if (key == "token") {
      conf.token = value;
    } else if (key == "token_file") {
      conf.token_file = value;
    } else if (key == "tls_cert") {
      conf.tls_cert = value;
    } else if (key == "tls_key") {
      conf.tls_key = value;
    } else if (key == "tls_ca") {
      conf.tls_ca = value;
    } else if (key == "tls_client_auth") {
      auto b = ParseBool(value);
      if (!b) {
        return Error{"--rdzv-conf: key 'tls_client_auth' needs a boolean (1/0, true/false), got '" +
                     value + "'"};
      }
      conf.tls_client_auth = *b;
    } else {
      conf.warnings.push_back("--rdzv-conf: ignoring unknown key '" + key + "'");
    }
  }
  // A node is lost after interval * attempts.
  if (auto e = CheckMaxSeconds("--rdzv-conf: keep_alive_interval * keep_alive_max_attempt",
                               conf.keep_alive_interval.count() * conf.keep_alive_max_attempt)) {
    return *e;
  }
  return conf;
}

}  // namespace ftrun::rendezvous
