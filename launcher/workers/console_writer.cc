#include "launcher/workers/console_writer.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "common/log.h"
#include "launcher/workers/output_tee.h"

namespace ftrun::launcher {
namespace {

constexpr std::chrono::milliseconds kRetry{10};

std::array<ConsoleWriter*, 3>& Writers() {
  static std::array<ConsoleWriter*, 3> writers{};
  return writers;
}

uint64_t CountLines(std::string_view text) {
  return static_cast<uint64_t>(std::count(text.begin(), text.end(), '\n'));
}

}  // namespace

ConsoleWriter& ConsoleWriter::Of(int fd) {
  auto& writers = Writers();
  const size_t slot = fd == STDERR_FILENO ? 2 : 1;
  if (writers[slot] == nullptr) {
    if (writers[1] == nullptr && writers[2] == nullptr) std::atexit(FlushAllAtExit);
    writers[slot] = new ConsoleWriter(slot);  // lives as long as the process
  }
  return *writers[slot];
}

ConsoleDrops TotalConsoleDrops() {
  ConsoleDrops sum;
  for (ConsoleWriter* w : Writers()) {
    if (w == nullptr) continue;
    sum.lines += w->drops().lines;
    sum.bytes += w->drops().bytes;
  }
  return sum;
}

std::string ConsoleWriter::Name() const { return fd_ == STDERR_FILENO ? "stderr" : "stdout"; }

void ConsoleWriter::Write(const boost::asio::any_io_executor& executor, std::string_view text) {
  if (!broken_ && out_.Moved()) {
    // The descriptor was pointed elsewhere (msrun's background supervisor moves its stdout
    // into its log file once the job runs): follow it.
    Flush();
    out_.Reopen();
  }
  if (buffered() > 0) Flush();
  if (buffered() == 0 && !broken_) {
    const ssize_t w = out_.TryWrite(text.data(), text.size());
    if (out_.reopen_error() != 0 && !reported_reopen_) {
      reported_reopen_ = true;
      WorkerLog()->warn(
          "console={} cannot be opened again non-blocking ({}): tee'd output may wait for it",
          Name(), std::strerror(out_.reopen_error()));
    }
    if (w < 0) Fail();
    if (w >= 0) {
      if (static_cast<size_t>(w) == text.size()) return;
      buffer_.assign(text.substr(static_cast<size_t>(w)));  // a begun line goes out whole
      head_ = 0;
      ScheduleRetry(executor);
      return;
    }
  }
  if (broken_ || buffered() + text.size() > kConsoleBuffer) {
    Drop(text.size(), CountLines(text));
    return;
  }
  buffer_.append(text);
  ScheduleRetry(executor);
}

void ConsoleWriter::Flush() {
  while (buffered() > 0) {
    const ssize_t w = out_.TryWrite(buffer_.data() + head_, buffered());
    if (w == 0) break;
    if (w < 0) {
      Fail();
      const std::string_view rest(buffer_.data() + head_, buffered());
      Drop(rest.size(), CountLines(rest));
      head_ = buffer_.size();
      break;
    }
    head_ += static_cast<size_t>(w);
  }
  if (buffered() == 0) {
    buffer_.clear();
    head_ = 0;
    if (episode_.lines > 0 && !broken_) {
      WorkerLog()->warn(
          "console={} takes output again; dropped_lines={} dropped_bytes={} of worker output "
          "while it did not",
          Name(), episode_.lines, episode_.bytes);
      episode_ = {};
    }
  } else if (head_ > kConsoleBuffer / 2) {
    buffer_.erase(0, head_);
    head_ = 0;
  }
}

void ConsoleWriter::Fail() {
  if (!reported_failure_) {
    reported_failure_ = true;
    WorkerLog()->warn("console={} cannot be written ({}): tee'd output to it is dropped", Name(),
                      std::strerror(errno));
  }
  broken_ = true;
}

void ConsoleWriter::ScheduleRetry(const boost::asio::any_io_executor& executor) {
  if (retry_scheduled_) return;
  retry_scheduled_ = true;
  // Clears the flag however the wait ends, even when its loop goes away first.
  struct Pending {
    ConsoleWriter* w;
    ~Pending() { w->retry_scheduled_ = false; }
  };
  auto pending = std::make_shared<Pending>(Pending{this});
  auto timer = std::make_shared<boost::asio::steady_timer>(executor, kRetry);
  timer->async_wait([this, timer, pending](const boost::system::error_code& ec) mutable {
    pending.reset();
    if (ec) return;
    Flush();
    if (buffered() > 0 && sources_ > 0) ScheduleRetry(timer->get_executor());
  });
}

void ConsoleWriter::Drop(size_t bytes, uint64_t lines) {
  if (episode_.lines == 0 && episode_.bytes == 0 && !broken_) {
    WorkerLog()->warn(
        "console={} is not being read: worker output (--tee) that does not fit its {} KiB "
        "buffer is dropped until it is",
        Name(), kConsoleBuffer / 1024);
  }
  episode_.lines += lines;
  episode_.bytes += bytes;
  total_.lines += lines;
  total_.bytes += bytes;
}

void ConsoleWriter::FlushAtExit() {
  const auto deadline = std::chrono::steady_clock::now() + kConsoleExitFlush;
  for (;;) {
    Flush();
    if (buffered() == 0) break;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{out_.poll_fd(), POLLOUT, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
  }
  if (buffered() > 0) {
    const std::string_view rest(buffer_.data() + head_, buffered());
    Drop(rest.size(), CountLines(rest));
    buffer_.clear();
    head_ = 0;
  }
  if (total_.lines > 0 || total_.bytes > 0) {
    WorkerLog()->warn("console={} dropped_lines={} dropped_bytes={} of worker output in all",
                      Name(), total_.lines, total_.bytes);
  }
}

void ConsoleWriter::FlushAllAtExit() {
  for (ConsoleWriter* w : Writers()) {
    if (w != nullptr) w->FlushAtExit();
  }
}

}  // namespace ftrun::launcher
