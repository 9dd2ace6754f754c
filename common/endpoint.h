// host[:port] endpoints as torchrun writes them (IPv6 in brackets: [::1]:29400).
#pragma once

#include <string>
#include <string_view>

#include "common/result.h"

namespace ftrun {

struct Endpoint {
  std::string host;  // without brackets
  int port = 0;

  // "host:port", with brackets around an IPv6 host.
  std::string ToString() const;
};

// Parses "host", "host:port", "[v6]" or "[v6]:port"; a missing port is default_port, or an
// error when default_port < 0. `option` names the flag in error messages.
Result<Endpoint> ParseEndpoint(std::string_view text, int default_port, std::string_view option);

// A TCP port number 0..65535 from text.
Result<int> ParsePort(std::string_view text, std::string_view option);

}  // namespace ftrun
