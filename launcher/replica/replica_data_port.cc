#include "launcher/replica/replica_data_port.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <list>
#include <system_error>

#include "common/log.h"
#include "launcher/replica/crc32c.h"
#include "launcher/replica/replica_wire.h"
#include "rendezvous/credentials.h"

namespace ftrun::launcher {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
// Received and checksummed a piece at a time, so the checksum reads bytes still in the cache.
constexpr size_t kPieceBytes = size_t{1} << 20;
constexpr auto kTicketTime = std::chrono::seconds(2);
constexpr auto kReadTime = std::chrono::seconds(10);

void SetReadTimeout(int fd, Clock::duration t) {
  const auto ms = std::max<int64_t>(1, std::chrono::duration_cast<milliseconds>(t).count());
  timeval tv{.tv_sec = static_cast<time_t>(ms / 1000),
             .tv_usec = static_cast<suseconds_t>(ms % 1000 * 1000)};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

// How a read of a known length ended.
struct Read {
  size_t got = 0;
  bool clean_end = false;  // the sender closed (not a timeout, reset or error)
};

// Reads out.size() bytes, unless `until` passes (each recv is given the time left) or the
// stream ends first.
Read ReadAll(int fd, std::span<std::byte> out, Clock::time_point until) {
  Read r;
  while (r.got < out.size()) {
    const auto left = until - Clock::now();
    if (left <= Clock::duration::zero()) break;
    SetReadTimeout(fd, left);
    const ssize_t n = recv(fd, out.data() + r.got, out.size() - r.got, MSG_WAITALL);
    if (n > 0) {
      r.got += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      r.clean_end = n == 0;
      break;
    }
  }
  return r;
}

void Reply(int fd, DataPortCode code, const std::string& message) {
  std::string out(2, '\0');
  out[0] = static_cast<char>(code);
  const std::string text = message.substr(0, 255);
  out[1] = static_cast<char>(text.size());
  out += text;
  (void)!send(fd, out.data(), out.size(), MSG_NOSIGNAL);
}

std::string PeerName(const sockaddr_storage& a) {
  char host[INET6_ADDRSTRLEN + 1] = "?";
  char port[8] = "?";
  getnameinfo(reinterpret_cast<const sockaddr*>(&a), sizeof a, host, sizeof host, port, sizeof port,
              NI_NUMERICHOST | NI_NUMERICSERV);
  return std::string(host) + ":" + port;
}

}  // namespace

struct ReplicaDataPort::Connection {
  std::thread thread;
  std::atomic<bool> done{false};
};

ReplicaDataPort::ReplicaDataPort(Hooks hooks, Options options)
    : hooks_(std::move(hooks)), opts_(options) {}

ReplicaDataPort::~ReplicaDataPort() { Shutdown(); }

Result<int> ReplicaDataPort::Listen(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  if (const int rc = getaddrinfo(host.c_str(), "0", &hints, &res); rc != 0 || res == nullptr) {
    return Error{"the replica data port cannot listen on " + host + ": " + gai_strerror(rc)};
  }
  const int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  const bool bound = fd >= 0 && bind(fd, res->ai_addr, res->ai_addrlen) == 0 &&
                     listen(fd, static_cast<int>(kMaxConnections)) == 0;
  freeaddrinfo(res);
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (!bound || getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const std::string why = std::strerror(errno);
    if (fd >= 0) close(fd);
    return Error{"the replica data port cannot listen on " + host + ": " + why};
  }
  wake_fd_ = eventfd(0, EFD_CLOEXEC);
  if (wake_fd_ < 0) {
    close(fd);
    return Error{std::string("the replica data port: eventfd: ") + std::strerror(errno)};
  }
  listen_fd_ = fd;
  port_ = ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  acceptor_ = std::thread([this] { Accept(); });
  return port_;
}

std::optional<std::string> ReplicaDataPort::Expect(ReplicaWrite write, std::string peer) {
  std::string ticket = rendezvous::NewSecret();
  {
    std::lock_guard lock(mu_);
    if (!stopping_) {
      tickets_.emplace_back(ticket, Ticketed{.write = std::move(write),
                                             .peer = std::move(peer),
                                             .expires = Clock::now() + opts_.ticket_ttl});
      return ticket;
    }
  }
  const uint64_t id = write.id;
  write.buffer.reset();
  hooks_.abort(id);
  return std::nullopt;
}

std::vector<uint64_t> ReplicaDataPort::Revoke(const std::string& group) {
  std::vector<uint64_t> ids;
  std::lock_guard lock(mu_);
  std::erase_if(tickets_, [&](auto& t) {
    if (t.second.write.group != group) return false;
    LauncherLog()->info(
        "replica copy of {} step={} from {} revoked before its bytes came: a newer "
        "copy of it is being admitted",
        group, t.second.write.step, t.second.peer);
    ids.push_back(t.second.write.id);
    return true;
  });
  return ids;
}

std::optional<ReplicaDataPort::Ticketed> ReplicaDataPort::Claim(int fd, const std::string& ticket) {
  std::lock_guard lock(mu_);
  // Under the same lock as the claim: an eviction never picks a connection that holds one.
  for (auto& c : connections_) {
    if (c.first == fd) c.second = true;
  }
  // Every outstanding ticket is compared, in constant time each: the answer's timing tells a
  // stranger nothing about any ticket.
  auto found = tickets_.end();
  for (auto it = tickets_.begin(); it != tickets_.end(); ++it) {
    if (rendezvous::SecretsEqual(it->first, ticket)) found = it;
  }
  if (found == tickets_.end()) return std::nullopt;
  Ticketed t = std::move(found->second);
  tickets_.erase(found);
  return t;
}

void ReplicaDataPort::Drop(std::vector<Ticketed> dropped, const char* why) {
  for (auto& t : dropped) {
    LauncherLog()->warn("replica copy of {} step={} from {} given up before its bytes came: {}",
                        t.write.group, t.write.step, t.peer, why);
    const uint64_t id = t.write.id;
    t.write.buffer.reset();
    hooks_.abort(id);
  }
}

void ReplicaDataPort::Expire(bool all) {
  std::vector<Ticketed> expired;
  {
    std::lock_guard lock(mu_);
    const auto now = Clock::now();
    std::erase_if(tickets_, [&](auto& t) {
      if (!all && t.second.expires > now) return false;
      expired.push_back(std::move(t.second));
      return true;
    });
  }
  Drop(std::move(expired), all ? "the agent stopped" : "its data connection did not come in time");
}

size_t ReplicaDataPort::outstanding() const {
  std::lock_guard lock(mu_);
  return tickets_.size();
}

void ReplicaDataPort::LogRefusal(const std::string& peer, const std::string& why) {
  bool warn = false;
  {
    std::lock_guard lock(mu_);
    const auto now = Clock::now();
    warn = now - last_warned_ >= std::chrono::seconds(10);
    if (warn) last_warned_ = now;
  }
  LauncherLog()->log(warn ? spdlog::level::warn : spdlog::level::debug,
                     "replica data connection from {} refused: {}", peer, why);
}

void ReplicaDataPort::Forget(int fd) {
  {
    std::lock_guard lock(mu_);
    std::erase_if(connections_, [fd](const auto& e) { return e.first == fd; });
  }
  close(fd);
}

bool ReplicaDataPort::Admit(int fd) {
  std::lock_guard lock(mu_);
  if (stopping_ || connections_.size() >= 2 * kMaxConnections) return false;
  if (connections_.size() >= kMaxConnections) {
    // Full: the oldest connection still without a ticket makes room (its thread ends at once).
    // (One whose ticket has arrived but not yet been read is not idle.)
    auto idle = std::find_if(connections_.begin(), connections_.end(), [](const auto& c) {
      int queued = 0;
      return !c.second &&
             (ioctl(c.first, FIONREAD, &queued) != 0 || queued < static_cast<int>(kTicketBytes));
    });
    if (idle == connections_.end()) return false;
    shutdown(idle->first, SHUT_RDWR);
    idle->second = true;  // not chosen again while its thread winds down
  }
  connections_.emplace_back(fd, false);
  return true;
}

void ReplicaDataPort::Accept() {
  std::list<Connection> connections;
  for (;;) {
    pollfd fds[2] = {{.fd = listen_fd_, .events = POLLIN, .revents = 0},
                     {.fd = wake_fd_, .events = POLLIN, .revents = 0}};
    poll(fds, 2, 500);
    {
      std::lock_guard lock(mu_);
      if (stopping_) break;
    }
    Expire(false);
    connections.remove_if([](Connection& c) {
      if (!c.done) return false;
      c.thread.join();
      return true;
    });
    if ((fds[0].revents & POLLIN) == 0) continue;
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    const int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_CLOEXEC);
    if (fd < 0) {
      // Out of descriptors (or memory): the connection stays queued, and polling again at once
      // would spin.
      if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED) poll(nullptr, 0, 100);
      continue;
    }
    std::string peer = PeerName(addr);
    if (!Admit(fd)) {
      close(fd);
      LogRefusal(peer, "busy");
      continue;
    }
    Connection& c = connections.emplace_back();
    try {
      c.thread = std::thread([this, fd, peer, done = &c.done] {
        Receive(fd, peer);
        Forget(fd);
        *done = true;
      });
    } catch (const std::system_error& e) {
      LauncherLog()->warn("replica data connection from {} dropped: {}", peer, e.what());
      Forget(fd);
      connections.pop_back();
    }
  }
  for (auto& c : connections) c.thread.join();
}

void ReplicaDataPort::Receive(int fd, std::string peer) {
  const auto start = Clock::now();
  const timeval send_time{.tv_sec = 10, .tv_usec = 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &send_time, sizeof send_time);
  std::string ticket(kTicketBytes, '\0');
  std::optional<Ticketed> t;
  if (ReadAll(fd, std::as_writable_bytes(std::span(ticket)), start + kTicketTime).got ==
      kTicketBytes) {
    t = Claim(fd, ticket);
  }
  if (!t) {
    const std::string why = "no valid ticket";
    LogRefusal(peer, why);
    Reply(fd, DataPortCode::kNoTicket, why);
    return;
  }
  ReplicaWrite& w = t->write;
  auto give_up = [&](const std::string& why, bool quietly) {
    const uint64_t id = w.id;
    w.buffer.reset();  // so the group's next copy may have this buffer at once
    hooks_.abort(id);
    LauncherLog()->log(quietly ? spdlog::level::debug : spdlog::level::warn,
                       "replica copy of {} step={} from {} {}", w.group, w.step, t->peer, why);
  };
  w.PopulateIfFresh();
  // The sender's deadline for the whole copy (replica.proto): it may wait that long for the
  // commit checksum before sending the trailer.
  const auto deadline = start + std::chrono::seconds(10) + std::chrono::seconds(w.bytes >> 26);
  const std::span<std::byte> data = w.data();
  size_t offset = 0;
  uint32_t crc = 0;
  Read r;
  while (offset < data.size()) {
    const auto piece = data.subspan(offset, std::min(kPieceBytes, data.size() - offset));
    r = ReadAll(fd, piece, std::min(deadline, Clock::now() + kReadTime));
    crc = Crc32c(piece.first(r.got), crc);
    offset += r.got;
    if (r.got < piece.size()) break;
  }
  std::byte trailer[4];
  if (offset == data.size()) r = ReadAll(fd, trailer, deadline);
  if (offset < data.size() || r.got != sizeof trailer) {
    // Ending cleanly exactly before the checksum is how a sender gives up a copy it superseded.
    if (offset == data.size() && r.got == 0 && r.clean_end) {
      give_up("given up by its sender", true);
    } else {
      const size_t got = offset + (offset == data.size() ? r.got : 0);
      give_up("refused: the sender stopped after " + std::to_string(got) + " of " +
                  std::to_string(data.size() + sizeof trailer) + " bytes",
              false);
    }
    return;
  }
  const uint32_t sent = DecodeCrcTrailer(trailer);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  LauncherLog()->debug("replica of {} step={}: {} bytes received directly in {:.3f}s", w.group,
                       w.step, w.bytes, seconds);
  Status stored = hooks_.finish(w, sent, crc, seconds);
  w.buffer.reset();
  if (stored) ++received_;
  Reply(fd, stored ? DataPortCode::kStored : DataPortCode::kBadCopy,
        stored ? "" : stored.error().message);
}

void ReplicaDataPort::Shutdown() {
  {
    std::lock_guard lock(mu_);
    if (stopping_ || listen_fd_ < 0) return;
    stopping_ = true;
    for (const auto& c : connections_) shutdown(c.first, SHUT_RDWR);
  }
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
  if (acceptor_.joinable()) acceptor_.join();
  Expire(true);
  close(listen_fd_);
  close(wake_fd_);
}

}  // namespace ftrun::launcher
