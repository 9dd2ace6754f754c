#include "launcher/replica/replica_direct_send.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>

#include "launcher/replica/replica_wire.h"
#include "rendezvous/credentials.h"

namespace ftrun::launcher {
namespace {

using Clock = std::chrono::system_clock;

constexpr int64_t kConnectMs = 2000;  // an address that drops packets is given up this soon
constexpr int64_t kGraceMs = 2000;    // for the receiver's answer or close, however late

int64_t MsLeft(Clock::time_point deadline) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
}

// The time left until `deadline`, at least `floor_ms` (and 1 ms: 0 would mean none), as the
// socket's send and receive timeouts.
void TimeLeft(int fd, Clock::time_point deadline, int64_t floor_ms = 1) {
  const auto ms = std::max<int64_t>({1, floor_ms, MsLeft(deadline)});
  const timeval tv{.tv_sec = static_cast<time_t>(ms / 1000),
                   .tv_usec = static_cast<suseconds_t>(ms % 1000 * 1000)};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

bool SendAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

std::string Errno() { return std::strerror(errno); }

// A non-blocking connect given at most kConnectMs (and the time left); 0 or the errno.
int Connect(int fd, const addrinfo* ai, Clock::time_point deadline) {
  const int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  int err = 0;
  if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
    err = errno;
    if (err == EINPROGRESS) {
      pollfd p{.fd = fd, .events = POLLOUT, .revents = 0};
      const int64_t wait = std::clamp<int64_t>(MsLeft(deadline), 0, kConnectMs);
      socklen_t len = sizeof err;
      if (poll(&p, 1, static_cast<int>(wait)) != 1) {
        err = ETIMEDOUT;
      } else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
        err = errno;
      }
    }
  }
  fcntl(fd, F_SETFL, flags);
  return err;
}

}  // namespace

DirectResult SendDirect(const std::string& host, int port, const std::string& ticket, int memfd,
                        size_t bytes, Clock::time_point deadline,
                        const std::function<std::optional<uint32_t>()>& last_checksum,
                        const std::function<bool(int fd)>& watch) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
      rc != 0) {
    return {DirectOutcome::kNotConnected, host + ": " + gai_strerror(rc)};
  }
  std::string why = "no address";
  int fd = -1;
  for (const addrinfo* ai = res; ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    if (!watch(fd)) {  // stopping: no connect to wait for
      close(fd);
      freeaddrinfo(res);
      return {DirectOutcome::kFailed, "the agent is stopping"};
    }
    if (const int err = Connect(fd, ai, deadline); err != 0) {
      why = "data port " + std::to_string(port) + ": " + std::strerror(err);
      watch(-1);
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0) return {DirectOutcome::kNotConnected, why};
  const struct Closer {
    int fd;
    const std::function<bool(int)>& watch;
    ~Closer() {
      watch(-1);
      close(fd);
    }
  } closer{fd, watch};
  if (!SendAll(fd, ticket)) return {DirectOutcome::kNotConnected, "ticket: " + Errno()};
  off_t offset = 0;
  while (static_cast<size_t>(offset) < bytes) {
    if (Clock::now() >= deadline) return {DirectOutcome::kFailed, "out of time"};
    TimeLeft(fd, deadline);
    const ssize_t n = sendfile(fd, memfd, &offset, bytes - static_cast<size_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return {DirectOutcome::kFailed,
              n < 0 ? Errno() : "the snapshot ended after " + std::to_string(offset) + " bytes"};
    }
  }
  const auto crc = last_checksum();
  // However late, the receiver gets kGraceMs to close or answer: its abort must reach its loop
  // before a newer copy's admission, and a copy it stored must not be reported as failed.
  TimeLeft(fd, deadline, kGraceMs);
  if (!crc || MsLeft(deadline) <= 0) {
    shutdown(fd, SHUT_WR);
    char any;
    while (recv(fd, &any, 1, 0) > 0) {
    }
    if (crc) return {DirectOutcome::kFailed, "out of time waiting for the commit checksum"};
    return {DirectOutcome::kGivenUp, "superseded"};
  }
  const auto trailer = EncodeCrcTrailer(*crc);
  if (!SendAll(fd, std::string_view(reinterpret_cast<const char*>(trailer.data()), 4))) {
    return {DirectOutcome::kFailed, "checksum: " + Errno()};
  }
  unsigned char reply[2 + 255];
  size_t got = 0;
  while (got < 2 || got < 2u + reply[1]) {
    const ssize_t n = recv(fd, reply + got, sizeof reply - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return {DirectOutcome::kFailed, "no answer from the receiver"};
    got += static_cast<size_t>(n);
  }
  if (reply[0] != 0) {
    return {DirectOutcome::kFailed,
            "refused: " + rendezvous::Printable(
                              std::string_view(reinterpret_cast<char*>(reply) + 2, reply[1]))};
  }
  return {DirectOutcome::kStored, ""};
}

}  // namespace ftrun::launcher
