#include "launcher/channels/control_server.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/read_until.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>

#include "common/log.h"
#include "ftrun/v1/control.pb.h"
#include "launcher/channels/json_line.h"
#include "launcher/channels/pending_lines.h"
#include "launcher/channels/stale_control_dirs.h"

namespace ftrun::launcher {
namespace {

namespace v1 = ftrun::v1;
using stream = boost::asio::local::stream_protocol;

}  // namespace

// A message on its way out, with the descriptor it carries (owned; -1 for none).
struct Outgoing {
  std::string data;
  int fd = -1;
};

struct ControlServer::Connection {
  explicit Connection(boost::asio::io_context& io)
      : socket(io), in(kMaxControlLine + 1), hello_timer(io) {}
  ~Connection() {
    for (auto& o : out) {
      if (o.fd >= 0) ::close(o.fd);
    }
  }
  stream::socket socket;
  boost::asio::streambuf in;
  std::deque<Outgoing> out;
  bool writing = false;
  bool closed = false;
  int local_rank = -1;  // -1 until "hello"
  pid_t peer_pid = 0;
  boost::asio::steady_timer hello_timer;  // until "hello"
};

ControlServer::ControlServer(boost::asio::io_context& io, Events events)
    : io_(io), events_(std::move(events)) {}

ControlServer::~ControlServer() { Stop(); }

Status ControlServer::Start(const std::string& tmp_root) {
  RemoveStaleControlDirs(tmp_root);
  std::string tmpl = (std::filesystem::path(tmp_root) / "ftrun-control-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) {  // mkdtemp creates it 0700
    return Error{"cannot create the control directory in " + tmp_root + ": " +
                 std::strerror(errno)};
  }
  dir_ = tmpl;
  path_ = dir_ + "/agent.sock";
  boost::system::error_code ec;
  acceptor_ = std::make_unique<stream::acceptor>(io_);
  acceptor_->open(stream(), ec);
  if (!ec) acceptor_->bind(stream::endpoint(path_), ec);
  if (!ec) acceptor_->listen(64, ec);
  if (ec) return Error{"cannot listen on " + path_ + ": " + ec.message()};
  ::fcntl(acceptor_->native_handle(), F_SETFD, FD_CLOEXEC);
  Accept();
  return {};
}

void ControlServer::Stop() {
  if (!*alive_) return;
  *alive_ = false;
  boost::system::error_code ec;
  if (acceptor_) acceptor_->close(ec);
  for (auto& c : connections_) c->socket.close(ec);
  connections_.clear();
  by_rank_.clear();
  if (!path_.empty()) ::unlink(path_.c_str());
  if (!dir_.empty()) ::rmdir(dir_.c_str());
}

void ControlServer::SetWorkers(const std::vector<pid_t>& pids, int base_rank, int attempt) {
  auto old = connections_;  // Close() edits both containers
  for (auto& c : old) Close(c, "a new attempt started");
  by_rank_.clear();
  pids_ = pids;
  base_rank_ = base_rank;
  attempt_ = attempt;
  ranks_.assign(pids.size(), RankControl{});
}

const RankControl& ControlServer::rank(int local_rank) const { return ranks_.at(local_rank); }

int ControlServer::RankOfPeer(pid_t pid) const {
  const pid_t pgid = ::getpgid(pid);
  for (size_t i = 0; i < pids_.size(); ++i) {
    if (pids_[i] > 0 && pids_[i] == pgid) return static_cast<int>(i);
  }
  return -1;
}

void ControlServer::Accept() {
  auto c = std::make_shared<Connection>(io_);
  std::weak_ptr<bool> alive = alive_;
  acceptor_->async_accept(c->socket, [this, alive, c](const boost::system::error_code& ec) {
    auto a = alive.lock();
    if (!a || !*a) return;
    if (ec) {
      // Out of descriptors, say: try again a little later rather than spin on the loop.
      WorkerLog()->warn("control channel: accept failed: {}", ec.message());
      auto retry = std::make_shared<boost::asio::steady_timer>(io_, std::chrono::milliseconds(100));
      retry->async_wait([this, alive, retry](const boost::system::error_code&) {
        if (auto a = alive.lock(); a && *a) Accept();
      });
      return;
    }
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(c->socket.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
      c->peer_pid = cred.pid;
    }
    LimitUnbound(c);
    connections_.push_back(c);
    Read(c);
    Accept();
  });
}

void ControlServer::LimitUnbound(const std::shared_ptr<Connection>& c) {
  size_t unbound = 0;
  for (auto& other : connections_) unbound += other->local_rank < 0 ? 1 : 0;
  for (size_t i = 0; unbound >= kMaxUnboundControlConnections && i < connections_.size();) {
    auto oldest = connections_[i];
    if (oldest->local_rank >= 0) {
      ++i;
      continue;
    }
    Close(oldest, "over " + std::to_string(kMaxUnboundControlConnections) +
                      " connections wait for their 'hello'");
    --unbound;
  }
  std::weak_ptr<bool> alive = alive_;
  std::weak_ptr<Connection> weak = c;
  c->hello_timer.expires_after(hello_timeout_);
  c->hello_timer.async_wait([this, alive, weak](const boost::system::error_code& ec) {
    auto a = alive.lock();
    auto conn = weak.lock();
    if (ec || !a || !*a || !conn || conn->local_rank >= 0) return;
    Close(conn, "no 'hello' within " + std::to_string(hello_timeout_.count()) + " ms");
  });
}

void ControlServer::Read(std::shared_ptr<Connection> c) {
  std::weak_ptr<bool> alive = alive_;
  boost::asio::async_read_until(
      c->socket, c->in, '\n', [this, alive, c](const boost::system::error_code& ec, size_t n) {
        auto a = alive.lock();
        if (!a || !*a || c->closed) return;
        if (ec == boost::asio::error::not_found) return Close(c, "message over 64 KiB");
        if (ec) return Close(c, "");  // the worker closed it (or exited)
        std::string line(boost::asio::buffers_begin(c->in.data()),
                         boost::asio::buffers_begin(c->in.data()) + n - 1);
        c->in.consume(n);
        if (std::string err = Handle(*c, line); !err.empty()) return Close(c, err);
        Read(c);
      });
}

void ControlServer::Drain(int local_rank) {
  auto bound = connections_;  // Close() edits it
  for (auto& c : bound) {
    if (c->closed || c->local_rank != local_rank) continue;
    // What the dead process sent can only be what its socket buffer held.
    constexpr size_t kMaxDrained = 16 * 1024 * 1024;
    std::string err =
        ReadPendingLines(c->socket.native_handle(), c->in, kMaxControlLine, kMaxDrained,
                         [this, &c](const std::string& line) { return Handle(*c, line); });
    Close(c, err);
  }
}

bool ControlServer::Send(int local_rank, const std::string& json, int fd) {
  auto it = by_rank_.find(local_rank);
  if (it == by_rank_.end() || it->second->closed) return false;
  Outgoing o{json + "\n", -1};
  if (fd >= 0 && (o.fd = ::fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0) {
    WorkerLog()->warn("control channel: cannot pass a descriptor to local_rank {}: {}", local_rank,
                      std::strerror(errno));
    return false;
  }
  it->second->out.push_back(std::move(o));
  Write(it->second);
  return true;
}

void ControlServer::WriteWithFd(std::shared_ptr<Connection> c) {
  Outgoing& o = c->out.front();
  iovec iov{o.data.data(), o.data.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* cm = CMSG_FIRSTHDR(&msg);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(cm), &o.fd, sizeof(int));
  ssize_t n = ::sendmsg(c->socket.native_handle(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
    // The peer's queue is full: wait until it reads, without blocking the loop.
    c->writing = true;
    std::weak_ptr<bool> alive = alive_;
    c->socket.async_wait(stream::socket::wait_write,
                         [this, alive, c](const boost::system::error_code& ec) {
                           auto a = alive.lock();
                           if (!a || !*a) return;
                           c->writing = false;
                           if (ec) return Close(c, "");
                           Write(c);
                         });
    return;
  }
  if (n < 0) return Close(c, "");
  ::close(o.fd);  // the peer has its own copy now
  o.fd = -1;
  o.data.erase(0, static_cast<size_t>(n));
  if (o.data.empty()) c->out.pop_front();
  Write(c);
}

void ControlServer::Write(std::shared_ptr<Connection> c) {
  if (c->writing || c->out.empty() || c->closed) return;
  if (c->out.front().fd >= 0) return WriteWithFd(c);
  c->writing = true;
  std::weak_ptr<bool> alive = alive_;
  boost::asio::async_write(c->socket, boost::asio::buffer(c->out.front().data),
                           [this, alive, c](const boost::system::error_code& ec, size_t) {
                             auto a = alive.lock();
                             if (!a || !*a) return;
                             c->writing = false;
                             if (ec) return Close(c, "");
                             c->out.pop_front();
                             Write(c);
                           });
}

void ControlServer::Close(const std::shared_ptr<Connection>& c, const std::string& why) {
  if (c->closed) return;
  c->closed = true;
  c->hello_timer.cancel();
  if (!why.empty()) {
    // A flood of strangers must not flood the log: the first 10 connections closed before
    // their "hello" say why, then one in 1000 with the count.
    const bool stranger = c->local_rank < 0;
    const size_t n = stranger ? ++unbound_closed_ : 0;
    if (!stranger || n <= 10) {
      WorkerLog()->warn("control channel: closing the connection of {} (pid {}): {}",
                        stranger ? "a process" : "local_rank " + std::to_string(c->local_rank),
                        c->peer_pid, why);
    } else if (n % 1000 == 0) {
      WorkerLog()->warn("control channel: {} connections closed before their 'hello' (latest: {})",
                        n, why);
    }
    // Best effort, synchronously: the peer learns why before the connection goes.
    std::string line = JsonMessage("error").Set("message", why).str() + "\n";
    boost::system::error_code ec;
    c->socket.non_blocking(true, ec);
    c->socket.write_some(boost::asio::buffer(line), ec);
  }
  boost::system::error_code ec;
  c->socket.close(ec);
  if (c->local_rank >= 0) {
    auto it = by_rank_.find(c->local_rank);
    if (it != by_rank_.end() && it->second == c) {
      by_rank_.erase(it);
      if (c->local_rank < static_cast<int>(ranks_.size())) ranks_[c->local_rank].connected = false;
    }
  }
  std::erase(connections_, c);
}

std::string ControlServer::Handle(Connection& c, const std::string& text) {
  auto read = JsonLine::Read(text);  // once; each typed message below reuses it
  if (!read) return read.error().message;
  const JsonLine& line = *read;
  v1::ControlEnvelope envelope;
  if (auto s = line.Into(&envelope); !s) return s.error().message;
  const std::string& type = envelope.type();
  if (type.empty()) return "message without a 'type'";
  if (c.local_rank < 0) {
    if (type != "hello") return "the first message must be 'hello', not '" + type + "'";
    v1::ControlHello hello;
    if (auto s = line.Into(&hello); !s) return s.error().message;
    if (std::string err = Bind(c, hello); !err.empty()) return err;
  }
  return HandleBound(c.local_rank, type, line);
}

std::string ControlServer::Bind(Connection& c, const v1::ControlHello& hello) {
  const int64_t version = hello.version();
  const int64_t rank = hello.has_rank() ? hello.rank() : -1;
  if (version != kControlProtocolVersion) {
    return "protocol version " + std::to_string(version) +
           " is not supported (this agent "
           "speaks " +
           std::to_string(kControlProtocolVersion) + ")";
  }
  const int lr = RankOfPeer(c.peer_pid);
  if (lr < 0) return "pid " + std::to_string(c.peer_pid) + " is not one of this agent's workers";
  if (rank != base_rank_ + lr) {
    return "says rank " + std::to_string(rank) + " but is rank " + std::to_string(base_rank_ + lr);
  }
  for (auto& other : connections_) {
    if (other.get() != &c && other->local_rank == lr) {
      Close(other, "replaced by a new connection of the same rank");
      break;
    }
  }
  c.local_rank = lr;
  c.hello_timer.cancel();
  for (auto& sp : connections_) {
    if (sp.get() == &c) by_rank_[lr] = sp;
  }
  ranks_[lr].connected = true;
  Send(lr, JsonMessage("welcome")
               .Set("version", int64_t{kControlProtocolVersion})
               .Set("rank", rank)
               .Set("attempt", int64_t{attempt_})
               .str());
  return "";
}

}  // namespace ftrun::launcher
