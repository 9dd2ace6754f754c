// --rdzv-conf: "key1=value1,key2=value2" with torchrun's keys, meanings and defaults, plus
// ftrun's own keys. Pure parsing; no I/O.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace ftrun::rendezvous {

using Seconds = std::chrono::duration<double>;

// The longest duration ftrun takes from a user, about 31 years: a longer one cannot be armed
// as a timer (the steady clock counts nanoseconds in 64 bits, about 292 years).
inline constexpr double kMaxSeconds = 1e9;
// An error naming `what` when `seconds` is above kMaxSeconds (found by fuzzing: such values
// overflowed the deadlines computed from them).
std::optional<Error> CheckMaxSeconds(const std::string& what, double seconds);

struct RendezvousConf {
  Seconds timeout{900};                           // static: how long agents wait for node 0
  Seconds join_timeout{600};                      // dynamic: a round must form within this
  std::string join_timeout_key = "join_timeout";  // the key that set it (errors name it)
  Seconds last_call_timeout{30};                  // dynamic: extra wait once MIN nodes joined
  Seconds close_timeout{30};
  Seconds heartbeat_timeout{5};
  Seconds keep_alive_interval{5};  // liveness: a node is lost after interval * max_attempt
  int keep_alive_max_attempt = 3;
  Seconds read_timeout{60};
  std::optional<bool> is_host;  // unset: decided from the endpoint
  std::optional<int> rank;      // static: set from --node-rank
  std::string local_addr;
  std::string token;       // ftrun: shared secret every call must carry
  std::string token_file;  // ftrun: a file holding the token
  std::string tls_cert;    // ftrun: PEM files for TLS (credentials.h)
  std::string tls_key;
  std::string tls_ca;
  bool tls_client_auth = false;       // ftrun: the server requires client certificates (mTLS)
  int max_watches_per_peer = 512;     // ftrun: pending watch calls the server holds per address
  std::vector<std::string> warnings;  // e.g. unknown keys, ignored but worth a log line
  // The etcd backend's keys as given (protocol, cacert, cert, key, their etcd-v2 spellings
  // ca_cert, ssl_cert, ssl_cert_key, etcd_prefix, lease_ttl, user, password_file), checked by
  // rendezvous/etcd/etcd_conf.h.
  std::map<std::string, std::string> etcd;
};

// torchrun's split: ',' between pairs, the first '=' inside one; blanks trimmed. An empty key
// or value is an error. A repeated key keeps its last value.
Result<std::map<std::string, std::string>> SplitRendezvousConf(std::string_view text);

// Parses and validates every known key. Error messages name the key and the bad value.
Result<RendezvousConf> ParseRendezvousConf(std::string_view text);

// torchrun's boolean spelling: 1/true/t/yes/y and 0/false/f/no/n, any case.
std::optional<bool> ParseBool(std::string_view text);

}  // namespace ftrun::rendezvous
