// The etcd backend's settings from --rdzv-endpoint, --rdzv-conf and the environment.
//   protocol=http|https (any case, as torch's etcd-v2 takes it), cacert, cert, key: TLS to etcd
//     (PEM files; torch's etcd backend's names, or its etcd-v2's ca_cert, ssl_cert,
//     ssl_cert_key); a cert without a key must hold the private key too (torch's etcd passes
//     such a file on);
//   etcd_prefix (default /ftrun/rdzv): where the jobs live (etcd_keys.h);
//   lease_ttl (seconds, default 5): each agent's lease, so how long a lost agent takes to be
//     seen, and how long etcd may be unreachable before an agent gives up;
//   user, password_file, or FTRUN_ETCD_USER, FTRUN_ETCD_PASSWORD(_FILE): etcd authentication.
// Reading the files is blocking: call at start-up. Errors name the key, variable or file.
#pragma once

#include <string>
#include <vector>

#include "common/environment.h"
#include "common/result.h"
#include "rendezvous/etcd/etcd_client.h"
#include "rendezvous/rendezvous_conf.h"

namespace ftrun::rendezvous::etcd {

struct EtcdConf {
  EtcdClientOptions client;
  std::string prefix = "/ftrun/rdzv";
  int lease_ttl = 5;  // seconds (etcd grants whole seconds)
};

// --rdzv-endpoint's members, "host[:port],..." (default port 2379), as "host:port" each. An
// empty member is an error naming the option.
Result<std::vector<std::string>> ParseEtcdEndpoints(const std::string& text);

Result<EtcdConf> ResolveEtcdConf(const RendezvousConf& conf,
                                 const std::vector<std::string>& endpoints, const EnvMap& env);

}  // namespace ftrun::rendezvous::etcd
