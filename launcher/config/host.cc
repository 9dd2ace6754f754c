#include "launcher/config/host.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/udp.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <set>
#include <vector>

namespace ftrun::launcher {

std::string FullyQualifiedHostname() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "localhost";
  std::string hostname = name;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  addrinfo* res = nullptr;
  if (::getaddrinfo(hostname.c_str(), nullptr, &hints, &res) != 0 || res == nullptr) {
    return hostname;
  }
  hostent he{};
  hostent* result = nullptr;
  std::vector<char> buf(16384);
  int herr = 0;
  const void* addr = nullptr;
  socklen_t len = 0;
  if (res->ai_family == AF_INET) {
    addr = &reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
    len = sizeof(in_addr);
  } else {
    addr = &reinterpret_cast<sockaddr_in6*>(res->ai_addr)->sin6_addr;
    len = sizeof(in6_addr);
  }
  int family = res->ai_family;
  int rc = ::gethostbyaddr_r(addr, len, family, &he, buf.data(), buf.size(), &result, &herr);
  ::freeaddrinfo(res);
  if (rc != 0 || result == nullptr || result->h_name == nullptr) return hostname;
  std::vector<std::string> names = {result->h_name};
  for (char** a = result->h_aliases; a != nullptr && *a != nullptr; ++a) names.push_back(*a);
  for (const auto& n : names) {
    if (n.find('.') != std::string::npos) return n;
  }
  return result->h_name;
}

namespace {

// Numeric form of an address, comparable across sources.
std::string Numeric(const sockaddr* sa) {
  char buf[NI_MAXHOST] = {};
  socklen_t len = sa->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  if (::getnameinfo(sa, len, buf, sizeof buf, nullptr, 0, NI_NUMERICHOST) != 0) return "";
  std::string s = buf;
  if (auto pct = s.find('%'); pct != std::string::npos) s.erase(pct);  // fe80::1%eth0
  return s;
}

}  // namespace

namespace {

std::set<std::string> LocalAddresses() {
  std::set<std::string> local;
  ifaddrs* ifs = nullptr;
  if (::getifaddrs(&ifs) == 0) {
    for (ifaddrs* i = ifs; i != nullptr; i = i->ifa_next) {
      if (i->ifa_addr &&
          (i->ifa_addr->sa_family == AF_INET || i->ifa_addr->sa_family == AF_INET6)) {
        local.insert(Numeric(i->ifa_addr));
      }
    }
    ::freeifaddrs(ifs);
  }
  return local;
}

std::vector<std::string> Resolve(const std::string& host) {
  std::vector<std::string> out;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return out;
  for (addrinfo* r = res; r != nullptr; r = r->ai_next) out.push_back(Numeric(r->ai_addr));
  ::freeaddrinfo(res);
  return out;
}

bool IsLoopback(const std::string& a) { return a.rfind("127.", 0) == 0 || a == "::1"; }

}  // namespace

bool IsThisHost(const std::string& host, const std::string& fqdn) {
  if (host == "localhost" || host == fqdn) return true;
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) == 0 && host == name) return true;
  const std::set<std::string> local = LocalAddresses();
  for (const auto& a : Resolve(host)) {
    if (local.count(a) != 0 || IsLoopback(a)) return true;
  }
  return false;
}

ListenAddress ListenAddressFor(const std::string& host) {
  if (host == "localhost") return {"127.0.0.1", ""};
  boost::system::error_code ec;
  auto literal = boost::asio::ip::make_address(host, ec);
  if (!ec) {
    if (literal.is_unspecified()) return {"", "the endpoint is the any-address " + host};
    return {literal.to_string(), ""};
  }
  const std::set<std::string> local = LocalAddresses();
  std::string loopback;
  for (const auto& a : Resolve(host)) {
    if (IsLoopback(a)) {
      if (loopback.empty()) loopback = a;
    } else if (local.count(a) != 0) {
      return {a, ""};
    }
  }
  // The name is this host's but resolves here to a loopback address only (Debian's 127.0.1.1
  // line in /etc/hosts) or to no local address (a service name): the other nodes reach this
  // host by another address, which only every address covers.
  return {"", host + " resolves to " + (loopback.empty() ? "no local address" : loopback) +
                  " on this host"};
}

Result<std::string> ResolveIPv4(const std::string& host) {
  boost::asio::io_context io;
  boost::system::error_code ec;
  auto results =
      boost::asio::ip::tcp::resolver(io).resolve(boost::asio::ip::tcp::v4(), host, "", ec);
  if (ec || results.empty()) {
    return Error{"cannot resolve '" + host +
                 "' to an IPv4 address: " + (ec ? ec.message() : std::string("no address"))};
  }
  return Ok(results.begin()->endpoint().address().to_string());
}

std::string LocalAddressToward(const std::string& ip) {
  // connect() on a UDP socket sends nothing; it only picks the route (any port will do).
  boost::asio::io_context io;
  boost::system::error_code ec;
  const auto peer = boost::asio::ip::make_address_v4(ip, ec);
  if (ec) return "";
  boost::asio::ip::udp::socket socket(io);
  socket.connect({peer, 9}, ec);
  if (ec) return "";
  const auto self = socket.local_endpoint(ec);
  return ec ? "" : self.address().to_string();
}

Result<int> PickFreePort() {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor acceptor(io);
  boost::system::error_code ec;
  // Dual stack where possible, so the port is free for IPv4 and IPv6 alike.
  acceptor.open(boost::asio::ip::tcp::v6(), ec);
  if (!ec) acceptor.set_option(boost::asio::ip::v6_only(false), ec);
  if (!ec) acceptor.bind({boost::asio::ip::tcp::v6(), 0}, ec);
  if (ec) {
    acceptor.close();
    ec.clear();
    acceptor.open(boost::asio::ip::tcp::v4(), ec);
    if (!ec) acceptor.bind({boost::asio::ip::tcp::v4(), 0}, ec);
  }
  if (ec) return Error{"cannot find a free port: " + ec.message()};
  return acceptor.local_endpoint().port();
}

}  // namespace ftrun::launcher
