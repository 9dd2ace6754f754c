// Facts about this host needed for ranks and reports.
#pragma once

#include <string>

#include "common/result.h"

namespace ftrun::launcher {

// Python's socket.getfqdn(): the first dotted name among the canonical name and aliases of
// this host's address, else the canonical name, else gethostname(). Blocking (DNS): call at
// start-up only.
std::string FullyQualifiedHostname();

// Whether `host` names this machine: localhost, a loopback address, this host's name or
// FQDN, or a name or address that resolves to one of this host's interface addresses.
// Blocking (DNS): start-up only.
bool IsThisHost(const std::string& host, const std::string& fqdn);

// Where the rendezvous server for endpoint `host` listens: the endpoint's own address, so that
// nothing else on the host's other interfaces reaches it. `localhost` and loopback literals
// give loopback only; a name gives the first of its addresses that is a non-loopback address
// of this host. When there is none (the name resolves here to 127.0.1.1 only, or to an
// address of another machine such as a Kubernetes Service), `addr` is "" (every address)
// and `why` says why. Blocking (DNS): start-up only.
struct ListenAddress {
  std::string addr;  // numeric; "" : every address
  std::string why;   // why every address ("" otherwise)
};
ListenAddress ListenAddressFor(const std::string& host);

// `host` as an IPv4 address: itself when it is one, else its first IPv4 address from DNS
// (msrun's gethostbyname). Blocking (DNS): start-up only. The error names the host.
Result<std::string> ResolveIPv4(const std::string& host);

// The local IPv4 address this host uses to reach `ip` (a UDP connect, nothing is sent); ""
// when there is no route.
std::string LocalAddressToward(const std::string& ip);

// A TCP port that is free on every local address right now (bound to port 0, then closed).
Result<int> PickFreePort();

}  // namespace ftrun::launcher
