// ConsoleWriter: ftrun's own stdout or stderr as the tees (--tee, OutputTee) write worker
// lines to it, without ever blocking the loop. A console that is slow or not read at all
// (a full pipe, a stopped terminal, a dead ssh session) costs a bounded buffer, never time:
// what it cannot take now waits in a buffer of at most kConsoleBuffer bytes, retried every
// few milliseconds while a tee still reads its worker (so that the retries never keep the loop
// alive after the last worker; what is left then goes at the next write or at exit); a line
// that does not fit is dropped whole and counted, and the log says
// when dropping starts and how much was dropped once the console takes output again.
//
// It writes through NonBlockingOutput (common/), as ftrun's own log lines do.
//
// Thread: loop only, except FlushAtExit (registered with atexit at first use). Ownership: one
// writer per descriptor for the life of the process. Errors: a console that fails (EPIPE, a
// closed descriptor) drops what it is given, counted, and says so once.
#pragma once

#include <sys/types.h>

#include <boost/asio/any_io_executor.hpp>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "common/nonblocking_output.h"

namespace ftrun::launcher {

inline constexpr size_t kConsoleBuffer = 1024 * 1024;
// At exit, what is still buffered gets this long to go out; then it is dropped (counted).
inline constexpr std::chrono::milliseconds kConsoleExitFlush{1000};

struct ConsoleDrops {
  uint64_t lines = 0;
  uint64_t bytes = 0;
};

class ConsoleWriter {
 public:
  // The writer of ftrun's descriptor `fd` (1 or 2).
  static ConsoleWriter& Of(int fd);
  ConsoleWriter(const ConsoleWriter&) = delete;
  ConsoleWriter& operator=(const ConsoleWriter&) = delete;

  // Writes `text` (whole lines) now, or buffers it, or drops it; never waits. Retries of the
  // buffer run on `executor`.
  void Write(const boost::asio::any_io_executor& executor, std::string_view text);
  // A tee that writes here started or ended (drained): retries run only while one reads.
  void AddSource() { ++sources_; }
  void RemoveSource() { --sources_; }
  // Everything dropped so far.
  ConsoleDrops drops() const { return total_; }
  size_t buffered() const { return buffer_.size() - head_; }

 private:
  explicit ConsoleWriter(int fd) : fd_(fd), out_(fd) {}
  void Flush();
  void Fail();  // the console failed for good: say so once, drop from now on
  void ScheduleRetry(const boost::asio::any_io_executor& executor);
  void Drop(size_t bytes, uint64_t lines);
  void FlushAtExit();
  static void FlushAllAtExit();
  std::string Name() const;

  int fd_;
  NonBlockingOutput out_;
  bool broken_ = false;  // failed for good: drop from now on
  bool reported_reopen_ = false;
  std::string buffer_;
  size_t head_ = 0;  // buffer_[head_..] still to write
  bool retry_scheduled_ = false;
  int sources_ = 0;
  ConsoleDrops total_;
  ConsoleDrops episode_;  // since the console last took everything
  bool reported_failure_ = false;
};

// Dropped console output of both stdout and stderr (for the metrics).
ConsoleDrops TotalConsoleDrops();

}  // namespace ftrun::launcher
