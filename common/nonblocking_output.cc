#include "common/nonblocking_output.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace ftrun {

NonBlockingOutput::~NonBlockingOutput() {
  if (own_fd_ >= 0) ::close(own_fd_);
}

std::string NonBlockingOutput::Name() const {
  if (fd_ == STDOUT_FILENO) return "stdout";
  if (fd_ == STDERR_FILENO) return "stderr";
  return "fd " + std::to_string(fd_);
}

void NonBlockingOutput::Open() {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    mode_ = Mode::kBroken;
    return;
  }
  opened_ = {st.st_dev, st.st_ino};
  if (S_ISREG(st.st_mode)) {
    mode_ = Mode::kDirect;
  } else if (S_ISSOCK(st.st_mode)) {
    mode_ = Mode::kSocket;
  } else {
    const std::string self = "/proc/self/fd/" + std::to_string(fd_);
    own_fd_ = ::open(self.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    mode_ = own_fd_ >= 0 ? Mode::kOwn : Mode::kDirect;
    reopen_error_ = own_fd_ >= 0 ? 0 : errno;
  }
}

bool NonBlockingOutput::Moved() const {
  if (mode_ == Mode::kUnopened || mode_ == Mode::kBroken) return false;
  struct stat st {};
  return ::fstat(fd_, &st) == 0 && std::pair(st.st_dev, st.st_ino) != opened_;
}

void NonBlockingOutput::Reopen() {
  if (own_fd_ >= 0) ::close(own_fd_);
  own_fd_ = -1;
  mode_ = Mode::kUnopened;
}

ssize_t NonBlockingOutput::TryWrite(const char* data, size_t n) {
  if (mode_ == Mode::kUnopened) Open();
  for (;;) {
    ssize_t w = -1;
    switch (mode_) {
      case Mode::kOwn:
        w = ::write(own_fd_, data, n);
        break;
      case Mode::kSocket:
        w = ::send(fd_, data, n, MSG_DONTWAIT | MSG_NOSIGNAL);
        break;
      case Mode::kDirect:
        return WriteAll(fd_, data, n) ? static_cast<ssize_t>(n) : -1;
      case Mode::kUnopened:
      case Mode::kBroken:
        errno = EBADF;
        return -1;
    }
    if (w >= 0) return w;
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
  }
}

bool WriteWithin(int fd, std::string_view text, std::chrono::milliseconds limit) {
  NonBlockingOutput out(fd);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!text.empty()) {
    const ssize_t w = out.TryWrite(text.data(), text.size());
    if (w < 0) return false;
    text.remove_prefix(static_cast<size_t>(w));
    if (text.empty()) break;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{out.poll_fd(), POLLOUT, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) < 0 && errno != EINTR) return false;
  }
  return true;
}

bool WriteAll(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

}  // namespace ftrun
