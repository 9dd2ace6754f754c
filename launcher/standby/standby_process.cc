#include "launcher/standby/standby_process.h"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "launcher/workers/worker_process.h"

namespace ftrun::launcher {
namespace {

constexpr size_t kMaxLine = 4096;
constexpr char kMagic[] = "FTRUNHO1";

void AppendField(std::string& out, const std::string& field) {
  out += field;
  out.push_back('\0');
}

// Waits for `events` on `fd` until `deadline`; false on timeout or error.
bool PollUntil(int fd, short events, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() < 0) return false;
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, static_cast<int>(left.count()) + 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    return (p.revents & events) != 0;
  }
}

}  // namespace

// The child's exit handler outlives this object once the child is handed over.
struct StandbyProcess::Route {
  Spawner::ExitHandler to;
};

std::string EncodeHandover(const StandbyProcess::Handover& h) {
  std::string body;
  AppendField(body, h.cwd);
  AppendField(body, std::to_string(h.argv.size()));
  for (const auto& a : h.argv) AppendField(body, a);
  AppendField(body, std::to_string(h.env.size()));
  for (const auto& e : ToEnvStrings(h.env)) AppendField(body, e);
  std::string frame(kMagic, sizeof kMagic - 1);
  const uint32_t n = static_cast<uint32_t>(body.size());
  for (int i = 0; i < 4; ++i) frame.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return frame + body;
}

StandbyProcess::StandbyProcess(boost::asio::io_context& io, int socket_fd, Events events)
    : socket_(io, socket_fd), events_(std::move(events)), route_(std::make_shared<Route>()) {}

StandbyProcess::~StandbyProcess() {
  *alive_ = false;
  boost::system::error_code ec;
  socket_.close(ec);
}

Result<std::unique_ptr<StandbyProcess>> StandbyProcess::Start(boost::asio::io_context& io,
                                                              Spawner& spawner, ProcessSpec spec,
                                                              Events events) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    return Error{std::string("socketpair: ") + std::strerror(errno)};
  }
  std::unique_ptr<StandbyProcess> s(new StandbyProcess(io, fds[0], std::move(events)));
  spec.stdin_fd = fds[1];
  auto child = spawner.Spawn(spec, [route = s->route_](const ExitStatus& st) {
    if (route->to) {
      auto to = route->to;  // it may destroy the standby object
      to(st);
    }
  });
  ::close(fds[1]);
  if (!child) return child.error();
  s->child_ = std::move(*child);
  StandbyProcess* self = s.get();
  s->route_->to = [self](const ExitStatus& st) {
    // A copy: the handler may destroy the standby, and with it events_.
    auto on_exit = self->events_.on_exit;
    if (on_exit) on_exit(st);
  };
  s->Read();
  return s;
}

bool StandbyProcess::Runnable() const {
  if (!child_ || child_->exited()) return false;
  const char state = ProcessStateLetter(child_->pid());
  return state == 'R' || state == 'S' || state == 'D';
}

void StandbyProcess::Read() {
  std::weak_ptr<bool> alive = alive_;
  socket_.async_read_some(boost::asio::buffer(buf_),
                          [this, alive](const boost::system::error_code& ec, size_t n) {
                            auto a = alive.lock();
                            if (!a || !*a || ec) return;  // closed: the exit event follows
                            in_.append(buf_, n);
                            for (size_t nl; (nl = in_.find('\n')) != std::string::npos;) {
                              const std::string line = in_.substr(0, nl);
                              in_.erase(0, nl + 1);
                              OnLine(line);
                              if (!*a) return;
                            }
                            if (in_.size() > kMaxLine) in_.clear();  // not standby.py's
                            Read();
                          });
}

void StandbyProcess::OnLine(const std::string& line) {
  if (line == "ready") {
    if (events_.on_ready) events_.on_ready();
  } else if (line.rfind("broken ", 0) == 0) {
    const std::string rest = line.substr(7);
    const size_t sp = rest.find(' ');
    const std::string reason = rest.substr(0, sp);
    const std::string detail = sp == std::string::npos ? "" : rest.substr(sp + 1);
    if (events_.on_broken) events_.on_broken(reason, detail);
  } else {
    WorkerLog()->debug("standby pid={} said something unexpected ({} bytes)", pid(), line.size());
  }
}

Result<std::unique_ptr<ChildProcess>> StandbyProcess::HandOver(
    const Handover& h, Spawner::ExitHandler on_exit, std::chrono::milliseconds ack_timeout) {
  if (!Runnable()) return Error{"standby_not_runnable"};
  boost::system::error_code ec;
  socket_.cancel(ec);  // the pending read ends (aborted); the rest is synchronous
  const int fd = socket_.native_handle();
  const auto deadline = std::chrono::steady_clock::now() + ack_timeout;
  const std::string frame = EncodeHandover(h);
  size_t sent = 0;
  bool fds_sent = false;
  while (sent < frame.size()) {
    iovec iov{const_cast<char*>(frame.data() + sent), frame.size() - sent};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(3 * sizeof(int))] = {};
    if (!fds_sent) {
      const int fds[3] = {h.stdin_fd, h.stdout_fd, h.stderr_fd};
      msg.msg_control = control;
      msg.msg_controllen = sizeof control;
      cmsghdr* cm = CMSG_FIRSTHDR(&msg);
      cm->cmsg_level = SOL_SOCKET;
      cm->cmsg_type = SCM_RIGHTS;
      cm->cmsg_len = CMSG_LEN(sizeof fds);
      std::memcpy(CMSG_DATA(cm), fds, sizeof fds);
    }
    const ssize_t n = ::sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (!PollUntil(fd, POLLOUT, deadline)) return Error{"handover_timeout phase=send"};
      continue;
    }
    if (n <= 0) return Error{std::string("handover_send_failed error=") + std::strerror(errno)};
    fds_sent = true;
    sent += static_cast<size_t>(n);
  }
  // "ack\n", possibly after lines the loop has not read yet.
  std::string got = in_;
  for (;;) {
    if (got.find("ack\n") != std::string::npos) break;
    if (got.size() > kMaxLine) return Error{"handover_bad_answer"};
    if (!PollUntil(fd, POLLIN, deadline)) return Error{"handover_timeout phase=ack"};
    char b[256];
    const ssize_t n = ::recv(fd, b, sizeof b, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) return Error{"handover_no_ack detail=standby_closed_its_socket"};
    got.append(b, static_cast<size_t>(n));
  }
  route_->to = std::move(on_exit);
  socket_.close(ec);
  return std::move(child_);
}

void StandbyProcess::Kill() {
  if (child_) child_->SignalGroup(SIGKILL);
}

}  // namespace ftrun::launcher
