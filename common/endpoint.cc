#include "common/endpoint.h"

#include <charconv>

namespace ftrun {

std::string Endpoint::ToString() const {
  bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

Result<int> ParsePort(std::string_view text, std::string_view option) {
  int port = -1;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), port);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || port < 0 ||
      port > 65535) {
    return Error{std::string(option) + ": '" + std::string(text) +
                 "' is not a port number (0-65535)"};
  }
  return port;
}

Result<Endpoint> ParseEndpoint(std::string_view text, int default_port, std::string_view option) {
  Endpoint ep;
  std::string_view rest;
  if (!text.empty() && text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string_view::npos || close == 1) {
      return Error{std::string(option) + ": '" + std::string(text) +
                   "' has an unterminated or empty [IPv6] host"};
    }
    ep.host = std::string(text.substr(1, close - 1));
    rest = text.substr(close + 1);
    if (!rest.empty() && rest.front() != ':') {
      return Error{std::string(option) + ": unexpected '" + std::string(rest) + "' after ']'"};
    }
  } else {
    size_t colon = text.rfind(':');
    // A bare IPv6 address without brackets has several colons: all of it is the host.
    if (colon != std::string_view::npos && text.find(':') == colon) {
      ep.host = std::string(text.substr(0, colon));
      rest = text.substr(colon);
    } else {
      ep.host = std::string(text);
    }
  }
  if (ep.host.empty()) {
    return Error{std::string(option) + ": '" + std::string(text) + "' has no host"};
  }
  if (rest.empty()) {
    if (default_port < 0) {
      return Error{std::string(option) + ": '" + std::string(text) + "' has no port"};
    }
    ep.port = default_port;
    return ep;
  }
  auto port = ParsePort(rest.substr(1), option);
  if (!port) return port.error();
  ep.port = *port;
  return ep;
}

}  // namespace ftrun
