// OutputTee: one tee'd worker stream (torchrun's --tee). The worker writes into a pipe; the
// agent copies every byte to the stream's log file, and every line, prefixed with
// "[<role><local_rank>]:", to its own stdout or stderr (unless --local-ranks-filter hides the
// rank). Lines matching a --duplicate-*-filters entry are also appended to a shared file.
// Unlike torchrun's 0.1 s file tailing, lines reach the console as they are written. The
// console is written through ConsoleWriter, which never blocks (a console that is not read
// costs dropped lines, counted, never the loop's time). A line longer than kMaxTeeLine is cut
// on the console (not in the log file) into pieces of that size, each ended by
// kTeeLineCutMarker, so that a stream without newlines costs bounded memory.
//
// Thread: loop only. Ownership: owns the pipe's read end, the log file and (shared) filter
// file descriptors. Errors writing the console or the files are logged once and ignored: a
// full disk must not stop training.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <memory>
#include <string>
#include <vector>

#include "common/nonblocking_output.h"
#include "common/result.h"

namespace ftrun::launcher {

inline constexpr size_t kMaxTeeLine = 64 * 1024;
inline constexpr const char* kTeeLineCutMarker = " [ftrun: line cut at 64 KiB]\n";

// An open file shared by several writers (the duplicate-filter file of one attempt).
struct SharedFile {
  int fd = -1;
  ~SharedFile();
};

struct TeeOptions {
  std::string log_file;     // "" : no file (--log-dir /dev/null)
  bool append_log = false;  // append to log_file instead of truncating it
  int console_fd = -1;      // 1 or 2; -1: not shown (filtered out)
  std::string prefix;       // e.g. "[default0]:"
  std::vector<std::string> filters;
  std::shared_ptr<SharedFile> filter_file;
};

class OutputTee {
 public:
  // Creates the pipe and opens the log file. The caller gives write_fd() to the child as its
  // stdout/stderr, then calls CloseWriteEnd().
  static Result<std::unique_ptr<OutputTee>> Create(boost::asio::io_context& io, TeeOptions options);
  ~OutputTee();
  OutputTee(const OutputTee&) = delete;
  OutputTee& operator=(const OutputTee&) = delete;

  int write_fd() const { return write_fd_; }
  void CloseWriteEnd();
  // Starts copying asynchronously.
  void Start();
  // The worker has exited: copy whatever the pipe still holds, then close it. Finishes in
  // the pending read's completion (posted at once), so the caller must keep the object alive
  // until handlers queued now have run.
  void Drain();

 private:
  explicit OutputTee(boost::asio::io_context& io) : pipe_(io) {}
  void ReadMore();
  void FinishDrain();
  void Consume(const char* data, size_t n);
  // Emits partial_ (a whole line when line_complete) cut into console-sized pieces.
  void EmitPieces(bool line_complete);
  void EmitLine(const std::string& line);
  void StopCounting();  // no longer a source of its console (ConsoleWriter::AddSource)

  TeeOptions opts_;
  boost::asio::posix::stream_descriptor pipe_;
  int write_fd_ = -1;
  int file_fd_ = -1;
  std::string partial_;
  std::vector<char> buf_ = std::vector<char>(64 * 1024);
  bool reading_ = false;  // an async read is in flight (it owns buf_)
  bool draining_ = false;
  bool drained_ = false;
  bool reported_error_ = false;
  bool counted_ = false;  // a source of its console
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

// Opens `path` for writing (created, truncated, close-on-exec). -1 and errno on failure.
int OpenLogFile(const std::string& path, bool append = false);

}  // namespace ftrun::launcher
