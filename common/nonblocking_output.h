// NonBlockingOutput: writes to one of ftrun's own descriptors (stdout, stderr) without ever
// waiting for its reader. A pipe, FIFO or terminal is opened again (/proc/self/fd/N) as a
// description of our own in non-blocking mode, so the shared one that workers and the shell
// also use keeps its flags; a socket is written with MSG_DONTWAIT; a regular file is written
// directly (it does not wait for a reader). When the descriptor is pointed elsewhere (dup2:
// msrun's background supervisor moves its output into its log), the next write follows it.
//
// Thread: not thread-safe; each user serialises its calls. Ownership: owns the description it
// opened, never `fd` itself. Errors: TryWrite says -1 with errno set; the caller decides.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

namespace ftrun {

class NonBlockingOutput {
 public:
  explicit NonBlockingOutput(int fd) : fd_(fd) {}
  ~NonBlockingOutput();
  NonBlockingOutput(const NonBlockingOutput&) = delete;
  NonBlockingOutput& operator=(const NonBlockingOutput&) = delete;

  // Bytes written, 0 when the reader takes nothing now, -1 when the descriptor failed (errno).
  ssize_t TryWrite(const char* data, size_t n);
  // Whether `fd` now names another file than the one this writes to (then the caller writes
  // out what it holds for the old one, and calls Reopen).
  bool Moved() const;
  void Reopen();
  // What to poll(2) for POLLOUT.
  int poll_fd() const { return own_fd_ >= 0 ? own_fd_ : fd_; }
  // Whether a write can block (a regular file, or a descriptor that could not be reopened).
  bool direct() const { return mode_ == Mode::kDirect; }
  // Whether a pipe or terminal could not be opened again non-blocking (then it is written
  // directly, and may block): errno of the failed open, 0 if none.
  int reopen_error() const { return reopen_error_; }
  // "stdout", "stderr" or "fd N".
  std::string Name() const;

 private:
  enum class Mode { kUnopened, kOwn, kSocket, kDirect, kBroken };
  void Open();

  int fd_;
  int own_fd_ = -1;
  std::pair<dev_t, ino_t> opened_{};  // what fd_ was when opened
  Mode mode_ = Mode::kUnopened;
  int reopen_error_ = 0;
};

// Writes `text` to `fd` through a NonBlockingOutput, waiting at most `limit` for a slow
// reader; false when not all of it went out in time (the rest is not written).
bool WriteWithin(int fd, std::string_view text, std::chrono::milliseconds limit);

// Writes all of `data` to `fd`, retrying short writes and EINTR (blocking).
bool WriteAll(int fd, const char* data, size_t n);

}  // namespace ftrun
