#include "rendezvous/etcd/etcd_conf.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <fstream>
#include <sstream>

#include "common/endpoint.h"

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

// One setting that torch's etcd and etcd-v2 backends spell differently (cert / ssl_cert ...).
Result<std::string> EitherSpelling(const RendezvousConf& conf, const std::string& etcd_name,
                                   const std::string& v2_name) {
  const std::string a = Get(conf, etcd_name), b = Get(conf, v2_name);
  if (!a.empty() && !b.empty() && a != b) {
    return Error{"--rdzv-conf: " + etcd_name + "='" + a + "' and " + v2_name + "='" + b +
                 "' are one setting (torch's etcd and etcd-v2 spellings); give one"};
  }
  return Ok(a.empty() ? b : a);
}

std::string TrimEnd(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

Result<std::vector<std::string>> ParseEtcdEndpoints(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string member =
        text.substr(start, comma == std::string::npos ? comma : comma - start);
    if (member.empty()) {
      return Error{"--rdzv-endpoint: '" + text + "' has an empty etcd member (stray ',')"};
    }
    auto ep = ParseEndpoint(member, 2379, "--rdzv-endpoint");
    if (!ep) return ep.error();
    out.push_back(ep->ToString());
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

Result<EtcdConf> ResolveEtcdConf(const RendezvousConf& conf,
                                 const std::vector<std::string>& endpoints, const EnvMap& env) {
  EtcdConf out;
  out.client.endpoints = endpoints;
  std::string protocol = Get(conf, "protocol").empty() ? "http" : Get(conf, "protocol");
  std::transform(protocol.begin(), protocol.end(), protocol.begin(),
                 [](unsigned char ch) { return std::tolower(ch); });
  if (protocol != "http" && protocol != "https") {
    return Error{"--rdzv-conf: protocol must be http or https, got '" + Get(conf, "protocol") +
                 "'"};
  }
  auto cacert = EitherSpelling(conf, "cacert", "ca_cert");
  if (!cacert) return cacert.error();
  auto cert = EitherSpelling(conf, "cert", "ssl_cert");
  if (!cert) return cert.error();
  auto key = EitherSpelling(conf, "key", "ssl_cert_key");
  if (!key) return key.error();
  if (protocol == "http" && (!cacert->empty() || !cert->empty() || !key->empty())) {
    return Error{
        "--rdzv-conf: cacert/cert/key (ca_cert/ssl_cert/ssl_cert_key) need protocol=https"};
  }
  if (cert->empty() && !key->empty()) {
    return Error{"--rdzv-conf: key '" + *key +
                 "' without cert: cert and key go together (a client certificate and its key)"};
  }
  if (protocol == "https") {
    if (!cacert->empty()) {
      auto ca = ReadFile(*cacert, "--rdzv-conf cacert");
      if (!ca) return ca.error();
      out.client.tls.ca = *ca;
    }
    if (!cert->empty()) {
      auto c = ReadFile(*cert, "--rdzv-conf cert");
      if (!c) return c.error();
      out.client.tls.cert = *c;
      if (!key->empty()) {
        auto k = ReadFile(*key, "--rdzv-conf key");
        if (!k) return k.error();
        out.client.tls.key = *k;
      } else if (c->find("PRIVATE KEY-----") != std::string::npos) {
        out.client.tls.key = *c;  // one PEM file with both; OpenSSL reads each block it needs
      } else {
        return Error{"--rdzv-conf: cert '" + *cert +
                     "' holds no private key: give key (a client certificate and its key)"};
      }
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
