// One look at a rendezvous endpoint before an agent joins it, so that an endpoint that can
// never work fails in seconds with one line instead of the join retry's timeout (900 s):
// a host that does not resolve, or a port held by something that is not a rendezvous (it
// accepts the connection but does not answer HTTP/2, which ftrun's gRPC server does at once).
// Nothing listening (connection refused, no route yet) is what a rendezvous that is still
// starting looks like: that is left to the join retry.
// Blocking, bounded by `timeout` (plus name resolution); start-up only, never on the loop.
#pragma once

#include <chrono>
#include <string>

#include "common/result.h"

namespace ftrun::launcher {

enum class EndpointLook {
  kRendezvous,     // answered HTTP/2 (an ftrun rendezvous, or TLS was not checked)
  kNotListening,   // refused, unreachable or no answer to connect: maybe still starting
  kNotRendezvous,  // accepted, then no HTTP/2: some other program holds the port
  kUnresolvable,   // the host name does not resolve
};

struct EndpointProbe {
  EndpointLook look = EndpointLook::kNotListening;
  std::string detail;  // e.g. the resolver's or the socket's error
};

// `tls`: the server speaks TLS, so only resolution and the connection are checked.
EndpointProbe ProbeEndpoint(const std::string& host, int port, bool tls,
                            std::chrono::milliseconds timeout = std::chrono::milliseconds(5000));

// The one-line error for a probe that rules the endpoint out (kUnresolvable, kNotRendezvous),
// naming `what` (e.g. "--rdzv-endpoint nosuch:29400"); success otherwise.
Status EndpointUsable(const EndpointProbe& probe, const std::string& what);

}  // namespace ftrun::launcher
