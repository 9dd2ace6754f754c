#include "launcher/workers/output_tee.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "launcher/workers/console_writer.h"

namespace ftrun::launcher {

SharedFile::~SharedFile() {
  if (fd >= 0) ::close(fd);
}

int OpenLogFile(const std::string& path, bool append) {
  int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (append ? O_APPEND : O_TRUNC);
  return ::open(path.c_str(), flags, 0644);
}

Result<std::unique_ptr<OutputTee>> OutputTee::Create(boost::asio::io_context& io,
                                                     TeeOptions options) {
  std::unique_ptr<OutputTee> tee(new OutputTee(io));
  tee->opts_ = std::move(options);
  if (!tee->opts_.log_file.empty()) {
    tee->file_fd_ = OpenLogFile(tee->opts_.log_file, tee->opts_.append_log);
    if (tee->file_fd_ < 0) {
      return Error{"cannot open " + tee->opts_.log_file + ": " + std::strerror(errno)};
    }
  }
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    return Error{std::string("cannot create a pipe for --tee: ") + std::strerror(errno)};
  }
  tee->pipe_.assign(fds[0]);
  tee->write_fd_ = fds[1];
  return tee;
}

OutputTee::~OutputTee() {
  *alive_ = false;
  StopCounting();
  CloseWriteEnd();
  if (file_fd_ >= 0) ::close(file_fd_);
}

void OutputTee::CloseWriteEnd() {
  if (write_fd_ >= 0) ::close(write_fd_);
  write_fd_ = -1;
}

void OutputTee::Start() {
  if (opts_.console_fd >= 0) ConsoleWriter::Of(opts_.console_fd).AddSource();
  counted_ = opts_.console_fd >= 0;
  ReadMore();
}

void OutputTee::StopCounting() {
  if (counted_) ConsoleWriter::Of(opts_.console_fd).RemoveSource();
  counted_ = false;
}

void OutputTee::ReadMore() {
  std::weak_ptr<bool> alive = alive_;
  reading_ = true;
  pipe_.async_read_some(boost::asio::buffer(buf_),
                        [this, alive](const boost::system::error_code& ec, size_t n) {
                          auto a = alive.lock();
                          if (!a || !*a) return;
                          reading_ = false;
                          if (n > 0) Consume(buf_.data(), n);
                          if (ec || draining_) {
                            FinishDrain();
                            return;
                          }
                          ReadMore();
                        });
}

void OutputTee::Drain() {
  if (draining_) return;
  draining_ = true;
  if (!reading_) {
    FinishDrain();
    return;
  }
  // The pending read may already hold data in buf_: let it complete, then finish there.
  boost::system::error_code ec;
  pipe_.cancel(ec);
}

void OutputTee::FinishDrain() {
  if (drained_) return;
  drained_ = true;
  if (pipe_.is_open()) {
    int fd = pipe_.native_handle();
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    for (;;) {
      ssize_t n = ::read(fd, buf_.data(), buf_.size());
      if (n > 0) {
        Consume(buf_.data(), static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      break;  // EOF, or EAGAIN: a leftover grandchild still holds the pipe open
    }
    boost::system::error_code ec;
    pipe_.close(ec);
  }
  if (!partial_.empty()) {
    EmitLine(partial_ + "\n");
    partial_.clear();
  }
  StopCounting();
}

void OutputTee::Consume(const char* data, size_t n) {
  if (file_fd_ >= 0 && !WriteAll(file_fd_, data, n) && !reported_error_) {
    reported_error_ = true;
    WorkerLog()->warn("cannot write {}: {}", opts_.log_file, std::strerror(errno));
  }
  size_t start = 0;
  for (size_t i = 0; i < n; ++i) {
    if (data[i] != '\n') continue;
    partial_.append(data + start, i + 1 - start);
    EmitPieces(/*line_complete=*/true);
    start = i + 1;
  }
  partial_.append(data + start, n - start);
  EmitPieces(/*line_complete=*/false);
}

void OutputTee::EmitPieces(bool line_complete) {
  // A line longer than kMaxTeeLine reaches the console in pieces of that size, each with the
  // marker, however the pipe's reads happened to split it; an unfinished line keeps its tail.
  const size_t newline = line_complete ? 1 : 0;
  size_t cut = 0;
  while (partial_.size() - newline - cut > kMaxTeeLine ||
         (!line_complete && partial_.size() - cut == kMaxTeeLine)) {
    EmitLine(partial_.substr(cut, kMaxTeeLine) + kTeeLineCutMarker);
    cut += kMaxTeeLine;
  }
  if (line_complete) {
    EmitLine(partial_.substr(cut));
    partial_.clear();
  } else {
    partial_.erase(0, cut);
  }
}

void OutputTee::EmitLine(const std::string& line) {
  if (opts_.console_fd >= 0) {
    ConsoleWriter::Of(opts_.console_fd).Write(pipe_.get_executor(), opts_.prefix + line);
  }
  if (opts_.filter_file && opts_.filter_file->fd >= 0) {
    for (const auto& f : opts_.filters) {
      if (line.find(f) != std::string::npos) {
        WriteAll(opts_.filter_file->fd, line.data(), line.size());
        break;
      }
    }
  }
}

}  // namespace ftrun::launcher
