#include "rendezvous/etcd/etcd_conf.h"

#include <charconv>
#include <fstream>
#include <sstream>

namespace ftrun::rendezvous::etcd {
namespace {

std::string Get(const RendezvousConf& conf, const std::string& key) {
  auto it = conf.etcd.find(key);
  return it == conf.etcd.end() ? "" : it->second;
}

Result<std::string> ReadFile(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{what + ": cannot read '" + path + "'"};
  std::ostringstream s;
  s << in.rdbuf();
  if (s.str().size() > 1 << 20) return Error{what + ": '" + path + "' is over 1 MiB"};
  return Ok(s.str());
}

std::string TrimEnd(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

Result<EtcdConf> ResolveEtcdConf(const RendezvousConf& conf,
                                 const std::vector<std::string>& endpoints, const EnvMap& env) {
  EtcdConf out;
  out.client.endpoints = endpoints;
  const std::string protocol = Get(conf, "protocol").empty() ? "http" : Get(conf, "protocol");
  if (protocol != "http" && protocol != "https") {
    return Error{"--rdzv-conf: protocol must be http or https, got '" + protocol + "'"};
  }
  const std::string cacert = Get(conf, "cacert"), cert = Get(conf, "cert"), key = Get(conf, "key");
  if (protocol == "http" && (!cacert.empty() || !cert.empty())) {
    return Error{"--rdzv-conf: cacert/cert need protocol=https"};
  }
  if (cert.empty() != key.empty()) {
    return Error{"--rdzv-conf: cert and key go together (a client certificate and its key)"};
  }
  if (protocol == "https") {
    if (!cacert.empty()) {
      auto ca = ReadFile(cacert, "--rdzv-conf cacert");
      if (!ca) return ca.error();
      out.client.tls.ca = *ca;
    }
    if (!cert.empty()) {
      auto c = ReadFile(cert, "--rdzv-conf cert");
      if (!c) return c.error();
      auto k = ReadFile(key, "--rdzv-conf key");
      if (!k) return k.error();
      out.client.tls.cert = *c;
      out.client.tls.key = *k;
    }
    out.client.https = true;  // no cacert: the system's roots verify etcd
  }
  if (auto p = Get(conf, "etcd_prefix"); !p.empty()) {
    if (p.front() != '/')
      return Error{"--rdzv-conf: etcd_prefix must start with '/', got '" + p + "'"};
    out.prefix = p;
  }
  if (auto t = Get(conf, "lease_ttl"); !t.empty()) {
    int v = 0;
    auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec != std::errc() || ptr != t.data() + t.size() || v < 2 || v > 3600) {
      return Error{"--rdzv-conf: lease_ttl needs whole seconds from 2 to 3600, got '" + t + "'"};
    }
    out.lease_ttl = v;
  }
  out.client.user = Get(conf, "user");
  if (out.client.user.empty()) out.client.user = Lookup(env, "FTRUN_ETCD_USER").value_or("");
  std::string password_file = Get(conf, "password_file");
  if (password_file.empty()) {
    password_file = Lookup(env, "FTRUN_ETCD_PASSWORD_FILE").value_or("");
  }
  if (!password_file.empty()) {
    auto pw = ReadFile(password_file, "etcd password file");
    if (!pw) return pw.error();
    out.client.password = TrimEnd(*pw);
  } else {
    out.client.password = Lookup(env, "FTRUN_ETCD_PASSWORD").value_or("");
  }
  if (out.client.user.empty() && !out.client.password.empty()) {
    return Error{"etcd: a password was given without a user (--rdzv-conf user or FTRUN_ETCD_USER)"};
  }
  // Each call waits at most this long; torchrun's read_timeout bounds it too.
  out.client.call_timeout = std::min(Seconds(conf.read_timeout), Seconds(5));
  return out;
}

}  // namespace ftrun::rendezvous::etcd
