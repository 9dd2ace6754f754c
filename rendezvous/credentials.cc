#include "rendezvous/credentials.h"

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "common/log.h"

namespace ftrun::rendezvous {
namespace {

Result<std::string> ReadSmallFile(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{what + ": cannot read '" + path + "'"};
  std::ostringstream s;
  s << in.rdbuf();
  if (s.str().size() > 1 << 20) return Error{what + ": '" + path + "' is over 1 MiB"};
  return Ok(s.str());
}

// conf's value, else the environment's; "" when neither is set.
std::string Pick(const std::string& conf_value, const EnvMap& env, const std::string& var) {
  return conf_value.empty() ? Lookup(env, var).value_or("") : conf_value;
}

Result<std::string> ReadToken(const std::string& path, const std::string& what) {
  auto text = ReadSmallFile(path, what);
  if (!text) return text.error();
  std::string t = *text;
  t.erase(t.find_last_not_of(" \t\r\n") + 1);
  if (t.empty()) return Error{what + ": '" + path + "' is empty"};
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && (st.st_mode & 077) != 0) {
    RendezvousLog()->warn("{}: '{}' is readable by other users (mode {:o}); chmod 600 it", what,
                          path, st.st_mode & 0777);
  }
  return Ok(t);
}

}  // namespace

std::string NewSecret() {
  unsigned char bytes[16];
  if (RAND_bytes(bytes, sizeof bytes) != 1) {
    // RAND_bytes fails only without an entropy source; the kernel's is then the fallback.
    std::ifstream("/dev/urandom", std::ios::binary).read(reinterpret_cast<char*>(bytes), 16);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

bool SecretsEqual(std::string_view a, std::string_view b) {
  unsigned char da[SHA256_DIGEST_LENGTH], db[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(a.data()), a.size(), da);
  SHA256(reinterpret_cast<const unsigned char*>(b.data()), b.size(), db);
  return CRYPTO_memcmp(da, db, sizeof da) == 0;
}

std::string Printable(std::string_view text, size_t max) {
  std::string out;
  const size_t n = std::min(text.size(), max);
  for (size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (text.size() > max) out += "...(+" + std::to_string(text.size() - max) + " bytes)";
  return out;
}

Result<Security> ResolveSecurity(const RendezvousConf& conf, const EnvMap& env) {
  Security s;
  if (!conf.token.empty()) {
    s.token = conf.token;
  } else if (!conf.token_file.empty()) {
    auto t = ReadToken(conf.token_file, "--rdzv-conf token_file");
    if (!t) return t.error();
    s.token = *t;
  } else if (auto t = Lookup(env, "FTRUN_RDZV_TOKEN"); t && !t->empty()) {
    s.token = *t;
  } else if (auto f = Lookup(env, "FTRUN_RDZV_TOKEN_FILE"); f && !f->empty()) {
    auto t = ReadToken(*f, "FTRUN_RDZV_TOKEN_FILE");
    if (!t) return t.error();
    s.token = *t;
  }
  const struct {
    std::string path;
    std::string what;
    std::string* into;
  } files[] = {
      {Pick(conf.tls_cert, env, "FTRUN_RDZV_TLS_CERT"), "tls_cert", &s.tls.cert},
      {Pick(conf.tls_key, env, "FTRUN_RDZV_TLS_KEY"), "tls_key", &s.tls.key},
      {Pick(conf.tls_ca, env, "FTRUN_RDZV_TLS_CA"), "tls_ca", &s.tls.ca},
  };
  for (const auto& f : files) {
    if (f.path.empty()) continue;
    auto text = ReadSmallFile(f.path, "--rdzv-conf " + f.what);
    if (!text) return text.error();
    *f.into = *text;
  }
  s.tls.client_auth = conf.tls_client_auth;
  if (s.tls.cert.empty() != s.tls.key.empty()) {
    return Error{"--rdzv-conf: tls_cert and tls_key go together (one is set, not the other)"};
  }
  if (s.tls.client_auth && s.tls.ca.empty()) {
    return Error{"--rdzv-conf: tls_client_auth needs tls_ca (the CA of the client certificates)"};
  }
  return s;
}

Result<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const TlsConfig& tls) {
  if (!tls.enabled()) return Ok(grpc::InsecureServerCredentials());
  if (tls.cert.empty() || tls.key.empty()) {
    return Error{"serving the rendezvous over TLS needs tls_cert and tls_key"};
  }
  grpc::SslServerCredentialsOptions o(
      tls.client_auth ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                      : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  o.pem_root_certs = tls.client_auth ? tls.ca : "";
  o.pem_key_cert_pairs.push_back({tls.key, tls.cert});
  auto creds = grpc::SslServerCredentials(o);
  if (!creds) return Error{"the TLS certificate or key was refused by gRPC"};
  return Ok(creds);
}

std::shared_ptr<grpc::ChannelCredentials> MakeChannelCredentials(const TlsConfig& tls) {
  if (!tls.enabled()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = tls.ca;
  o.pem_private_key = tls.key;
  o.pem_cert_chain = tls.cert;
  return grpc::SslCredentials(o);
}

}  // namespace ftrun::rendezvous
