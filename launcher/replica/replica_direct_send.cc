#include "launcher/replica/replica_direct_send.h"

#include <netdb.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>

#include "launcher/replica/replica_wire.h"

namespace ftrun::launcher {
namespace {

using Clock = std::chrono::system_clock;

// The time left until `deadline` as the socket's send and receive timeouts (at least 1 ms:
// 0 would mean none).
void TimeLeft(int fd, Clock::time_point deadline) {
  const auto ms = std::max<int64_t>(
      1, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
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

}  // namespace

DirectResult SendDirect(const std::string& host, int port, const std::string& ticket, int memfd,
                        size_t bytes, Clock::time_point deadline,
                        const std::function<std::optional<uint32_t>()>& last_checksum,
                        const std::function<void(int fd)>& watch) {
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
    TimeLeft(fd, deadline);
    watch(fd);
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      why = "data port " + std::to_string(port) + ": " + Errno();
      watch(-1);
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0) return {DirectOutcome::kNotConnected, why};
  const struct Closer {
    int fd;
    const std::function<void(int)>& watch;
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
  TimeLeft(fd, deadline);
  if (!crc) {
    shutdown(fd, SHUT_WR);
    char any;
    while (recv(fd, &any, 1, 0) > 0) {
    }
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
            "refused: " + std::string(reinterpret_cast<char*>(reply) + 2, reply[1])};
  }
  return {DirectOutcome::kStored, ""};
}

}  // namespace ftrun::launcher
