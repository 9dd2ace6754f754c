// Fuzz target: torch's watchdog requests (file_timer_server.h): JSON lines written into the
// agent's FIFO by torch.distributed.elastic.timer.FileTimerClient. Each input line goes to
// FileTimerServer::HandleLine, then the whole input goes through a real FIFO to a started
// server whose timers are allowed to fire. No process here is a worker, so an expired timer
// never sends a signal (the check says no, and the server logs and drops it).
//
// For any input: no crash, no sanitizer report, and the server keeps at most one timer per
// accepted request.
#include <fcntl.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "fuzz/fuzz_support.h"
#include "launcher/channels/file_timer_server.h"

namespace {

std::string& Dir() {
  static std::string* dir = [] {
    char tmpl[] = "/tmp/ftrun-fuzz-timer-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) ftrun::fuzz::Fail("mkdtemp");
    auto* d = new std::string(tmpl);
    std::atexit([] { std::filesystem::remove_all(Dir()); });
    return d;
  }();
  return *dir;
}

}  // namespace

FTRUN_FUZZ_INITIALIZE(Dir())

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 16384) return -1;  // well below a FIFO's 64 KiB buffer
  const std::string input(reinterpret_cast<const char*>(data), size);
  boost::asio::io_context io;
  uint64_t asked = 0;
  auto is_worker = [&asked](pid_t) {
    ++asked;
    return false;  // never signal anything from a fuzzer
  };

  // Line by line, without I/O.
  {
    ftrun::launcher::FileTimerServer server(io, Dir() + "/unused", is_worker);
    size_t accepted = 0, start = 0;
    while (start <= input.size()) {
      size_t nl = input.find('\n', start);
      if (nl == std::string::npos) nl = input.size();
      if (server.HandleLine(input.substr(start, nl - start))) ++accepted;
      start = nl + 1;
    }
    FTRUN_FUZZ_CHECK(server.timer_count() <= accepted, "more timers than accepted requests");
  }

  // Through the FIFO, with the timers armed and the expired ones fired.
  const std::string fifo = Dir() + "/watchdog";
  ftrun::launcher::FileTimerServer server(io, fifo, is_worker);
  if (!server.Start()) ftrun::fuzz::Fail("cannot start the watchdog FIFO");
  int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (w < 0) ftrun::fuzz::Fail("cannot open the watchdog FIFO");
  FTRUN_FUZZ_CHECK(::write(w, input.data(), input.size()) == static_cast<ssize_t>(size),
                   "short write to the FIFO");
  ::close(w);
  for (int i = 0; i < 8; ++i) {
    if (io.stopped()) io.restart();
    io.poll();
  }
  server.Stop();
  if (io.stopped()) io.restart();
  io.poll();
  return 0;
}
