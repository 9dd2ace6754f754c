// StderrLogSink: where ftrun's own log lines go (spdlog sink on descriptor 2). It never waits
// for the reader: a stderr that is not read (a full pipe, a stopped terminal, a dead ssh
// session) costs at most kLogBuffer bytes of memory and never a thread's time, so the agent's
// loop cannot stall on a log line. What does not fit is dropped whole, line by line, and
// counted; when stderr takes output again the next line says how many were dropped. At exit,
// what is still held gets kLogExitFlush to go out.
//
// Thread: any (spdlog's sink mutex serialises every call). Ownership: one per process
// (log.cc); it owns its buffer and the description NonBlockingOutput opened. Errors: a stderr
// that fails (EPIPE, closed) drops from then on, counted.
#pragma once

#include <spdlog/sinks/base_sink.h>

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

#include "common/nonblocking_output.h"

namespace ftrun {

inline constexpr size_t kLogBuffer = 256 * 1024;
inline constexpr std::chrono::milliseconds kLogExitFlush{1000};

class StderrLogSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit StderrLogSink(int fd = 2) : out_(fd) {}
  // Lines dropped so far because the reader did not take them.
  uint64_t dropped_lines();
  // Waits up to `limit` for what is held to go out; drops (and counts) the rest.
  void FlushWithin(std::chrono::milliseconds limit);

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override;
  void flush_() override;

 private:
  void Drain();  // writes what is held, as far as the reader takes it
  void Hold(const char* data, size_t n);

  NonBlockingOutput out_;
  std::string held_;
  size_t head_ = 0;  // held_[head_..] still to write
  bool broken_ = false;
  uint64_t dropped_ = 0;        // in all
  uint64_t dropped_since_ = 0;  // since stderr last took everything
};

}  // namespace ftrun
