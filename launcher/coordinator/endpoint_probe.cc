#include "launcher/coordinator/endpoint_probe.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

namespace ftrun::launcher {
namespace {

using Clock = std::chrono::steady_clock;

int RemainingMs(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() > 0 ? static_cast<int>(left.count()) : 0;
}

// The client's HTTP/2 preface and an empty SETTINGS frame; a server answers with SETTINGS.
constexpr char kPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0";
constexpr size_t kPrefaceSize = sizeof(kPreface) - 1;

EndpointProbe Look(const addrinfo* ai, bool tls, Clock::time_point deadline) {
  const int fd =
      ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
  if (fd < 0) return {EndpointLook::kNotListening, std::strerror(errno)};
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
    return {EndpointLook::kNotListening, std::strerror(errno)};
  }
  pollfd p{fd, POLLOUT, 0};
  if (::poll(&p, 1, RemainingMs(deadline)) != 1) return {EndpointLook::kNotListening, "timeout"};
  int err = 0;
  socklen_t len = sizeof err;
  ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0) return {EndpointLook::kNotListening, std::strerror(err)};
  if (tls) return {EndpointLook::kRendezvous, ""};
  if (::send(fd, kPreface, kPrefaceSize, MSG_NOSIGNAL) != static_cast<ssize_t>(kPrefaceSize)) {
    return {EndpointLook::kNotRendezvous, "the connection closed at once"};
  }
  unsigned char frame[9];
  size_t got = 0;
  while (got < sizeof frame) {
    p = {fd, POLLIN, 0};
    if (::poll(&p, 1, RemainingMs(deadline)) != 1) {
      return {EndpointLook::kNotRendezvous, "it accepted the connection but did not answer"};
    }
    const ssize_t n = ::recv(fd, frame + got, sizeof frame - got, 0);
    if (n <= 0) return {EndpointLook::kNotRendezvous, "it closed the connection"};
    got += static_cast<size_t>(n);
  }
  if (frame[3] != 0x04) {  // an HTTP/2 server's first frame is SETTINGS
    std::string start(reinterpret_cast<char*>(frame), sizeof frame);
    for (char& c : start) c = (c >= 32 && c < 127) ? c : '.';
    return {EndpointLook::kNotRendezvous, "it answered something else: '" + start + "...'"};
  }
  return {EndpointLook::kRendezvous, ""};
}

}  // namespace

EndpointProbe ProbeEndpoint(const std::string& host, int port, bool tls,
                            std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc;
  // A resolver that is busy (EAI_AGAIN) gets until the deadline; a name that does not
  // exist fails at once.
  while ((rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res)) ==
             EAI_AGAIN &&
         Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (rc != 0) return {EndpointLook::kUnresolvable, ::gai_strerror(rc)};
  EndpointProbe out{EndpointLook::kNotListening, "no address"};
  for (const addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    out = Look(ai, tls, deadline);
    if (out.look != EndpointLook::kNotListening) break;
  }
  ::freeaddrinfo(res);
  return out;
}

Status EndpointUsable(const EndpointProbe& probe, const std::string& what) {
  switch (probe.look) {
    case EndpointLook::kUnresolvable:
      return Error{what + ": the host does not resolve (" + probe.detail + ")"};
    case EndpointLook::kNotRendezvous:
      return Error{what + ": the port is held by a program that is not an ftrun rendezvous (" +
                   probe.detail + ")"};
    case EndpointLook::kRendezvous:
    case EndpointLook::kNotListening:
      break;
  }
  return {};
}

}  // namespace ftrun::launcher
