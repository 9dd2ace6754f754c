#include "common/stderr_log_sink.h"

#include <poll.h>

#include <algorithm>

namespace ftrun {

uint64_t StderrLogSink::dropped_lines() {
  std::lock_guard lock(mutex_);
  return dropped_;
}

void StderrLogSink::Drain() {
  while (head_ < held_.size() && !broken_) {
    const ssize_t w = out_.TryWrite(held_.data() + head_, held_.size() - head_);
    if (w == 0) return;
    if (w < 0) {
      broken_ = true;
      break;
    }
    head_ += static_cast<size_t>(w);
  }
  held_.erase(0, head_);
  head_ = 0;
}

void StderrLogSink::Hold(const char* data, size_t n) {
  if (broken_ || held_.size() - head_ + n > kLogBuffer) {
    ++dropped_;
    ++dropped_since_;
    return;
  }
  held_.append(data, n);
}

void StderrLogSink::sink_it_(const spdlog::details::log_msg& msg) {
  spdlog::memory_buf_t line;
  formatter_->format(msg, line);
  if (out_.Moved()) {  // pointed elsewhere (dup2): what the old file did not take is dropped
    dropped_ += static_cast<uint64_t>(std::count(held_.begin() + head_, held_.end(), '\n'));
    held_.clear();
    head_ = 0;
    out_.Reopen();
  }
  Drain();
  if (dropped_since_ > 0 && head_ == held_.size() && !broken_) {
    const std::string note = "[ftrun] " + std::to_string(dropped_since_) +
                             " log line(s) dropped: stderr was not being read\n";
    dropped_since_ = 0;
    Hold(note.data(), note.size());
    Drain();
  }
  if (held_.empty()) {
    const ssize_t w = out_.TryWrite(line.data(), line.size());
    if (w < 0) broken_ = true;
    if (w >= 0 && static_cast<size_t>(w) == line.size()) return;
    if (w > 0) {  // a begun line goes out whole
      held_.assign(line.data() + w, line.size() - static_cast<size_t>(w));
      return;
    }
  }
  Hold(line.data(), line.size());
}

void StderrLogSink::flush_() { Drain(); }

void StderrLogSink::FlushWithin(std::chrono::milliseconds limit) {
  std::lock_guard lock(mutex_);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    Drain();
    if (held_.empty() || broken_) break;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{out_.poll_fd(), POLLOUT, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
  }
  if (!held_.empty()) {
    dropped_ += static_cast<uint64_t>(std::count(held_.begin() + head_, held_.end(), '\n'));
    held_.clear();
    head_ = 0;
  }
}

}  // namespace ftrun
