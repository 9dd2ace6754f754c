// What proves a caller to the rendezvous: the per-node secret, the job token, TLS
// certificates; and how a peer's text is made safe to log. See ftrun(1), SECURITY.
//
// Thread: every function is thread-safe (no shared state). Errors: the Resolve* and
// credentials functions return an Error naming the option, variable or file at fault.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "common/environment.h"
#include "common/result.h"
#include "rendezvous/rendezvous_conf.h"

namespace grpc {
class ServerCredentials;
class ChannelCredentials;
}  // namespace grpc

namespace ftrun::rendezvous {

// A node secret's accepted length, in bytes (NewSecret makes 32 hex digits: 128 bits).
inline constexpr size_t kMinSecretBytes = 16;
inline constexpr size_t kMaxSecretBytes = 256;

// 128 bits from the OS's random source (OpenSSL RAND_bytes), as 32 hex digits.
std::string NewSecret();

// Whether `a` equals `b`, in time that does not depend on where they differ (both are
// hashed with SHA-256 and the digests compared with CRYPTO_memcmp).
bool SecretsEqual(std::string_view a, std::string_view b);

// `text` as a log may show it: bytes outside printable ASCII as \xNN, and at most `max`
// bytes of the original, then "...(+N bytes)".
std::string Printable(std::string_view text, size_t max = 80);

// TLS material as PEM text (empty: not used).
struct TlsConfig {
  std::string cert;          // this side's certificate chain
  std::string key;           // its private key
  std::string ca;            // the CA bundle that verifies the other side ("" : system roots)
  bool client_auth = false;  // server: require client certificates signed by `ca` (mutual TLS)
  bool enabled() const { return !cert.empty() || !ca.empty(); }
};

// The rendezvous' security settings of one process.
struct Security {
  std::string token;  // "" : no job token
  TlsConfig tls;
};

// From --rdzv-conf (token, token_file, tls_cert, tls_key, tls_ca, tls_client_auth) and the
// environment (FTRUN_RDZV_TOKEN, FTRUN_RDZV_TOKEN_FILE, FTRUN_RDZV_TLS_CERT, _KEY, _CA),
// --rdzv-conf first. A token file holds the token (trailing blanks and newlines dropped);
// reading it, or a certificate, is blocking: call at start-up.
Result<Security> ResolveSecurity(const RendezvousConf& conf, const EnvMap& env);

// gRPC credentials for a server / a channel: insecure when TLS is off. A server needs a
// certificate and key; with client_auth also a CA.
Result<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const TlsConfig& tls);
std::shared_ptr<grpc::ChannelCredentials> MakeChannelCredentials(const TlsConfig& tls);

}  // namespace ftrun::rendezvous
