// Helpers shared by the libFuzzer targets in fuzz/ (see fuzz/README.md): turning the fuzz input
// into an argv and an environment, silencing the parsers' help text, and driving a server of
// the agent over a real socket from inside the target.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/log.h"

namespace ftrun::fuzz {

// Stops the fuzzer with a message; libFuzzer saves the input as a crash.
[[noreturn]] inline void Fail(const std::string& what) {
  std::fprintf(stderr, "fuzz invariant violated: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}
#define FTRUN_FUZZ_CHECK(cond, msg)                                      \
  do {                                                                   \
    if (!(cond)) ::ftrun::fuzz::Fail(std::string(#cond) + ": " + (msg)); \
  } while (0)

// Help and version text go to stdout (std::cout), log lines to stderr through spdlog: neither
// is worth printing millions of times. libFuzzer itself reports on stderr, which stays.
inline void Quiet() {
  std::cout.setstate(std::ios::badbit);
  InitLogging(spdlog::level::off);
  // PET_* variables are command-line fallbacks: keep the fuzzer's environment out of it.
  for (const char* name : {"PET_NNODES", "PET_NPROC_PER_NODE", "PET_MASTER_PORT", "PET_RDZV_CONF",
                           "PET_RDZV_ENDPOINT", "PET_RDZV_BACKEND"}) {
    ::unsetenv(name);
  }
}

// Defines the target's LLVMFuzzerInitialize: Quiet(), then `setup` (the target's fixture,
// built once before the first input, e.g. a server on a socket), if any.
#define FTRUN_FUZZ_INITIALIZE(setup)                   \
  extern "C" int LLVMFuzzerInitialize(int*, char***) { \
    ::ftrun::fuzz::Quiet();                            \
    setup;                                             \
    return 0;                                          \
  }

// An argv and an environment from a fuzz input: the input is split at '\n' and '\0' into
// words; a word "@env KEY=VALUE" goes into the environment, every other word into argv. So a
// seed is a readable file with one argument per line.
struct CommandLine {
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
};

inline CommandLine SplitInput(const uint8_t* data, size_t size) {
  CommandLine out;
  std::string word;
  auto flush = [&] {
    if (word.rfind("@env ", 0) == 0) {
      const std::string kv = word.substr(5);
      const size_t eq = kv.find('=');
      if (eq != std::string::npos && eq > 0) out.env[kv.substr(0, eq)] = kv.substr(eq + 1);
    } else {
      out.argv.push_back(word);
    }
    word.clear();
  };
  for (size_t i = 0; i < size; ++i) {
    const char c = static_cast<char>(data[i]);
    if (c == '\n' || c == '\0') {
      flush();
    } else {
      word += c;
    }
  }
  if (!word.empty()) flush();
  return out;
}

// What the agent does with a configured duration: a deadline `d` from now on the steady
// clock (asio's expires_after, RendezvousState's After). A value the agent cannot represent
// this way is undefined behaviour that UBSan reports here.
template <class Rep, class Period>
std::chrono::steady_clock::time_point DeadlineAfter(std::chrono::duration<Rep, Period> d) {
  return std::chrono::steady_clock::now() +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(d);
}

// Plays a peer on a connected socket `fd` (made non-blocking here): sends `input`, shuts the
// sending side, and reads until the other end closes, while `io` runs the server's side.
// Returns what the server sent. A server that does not close within `limit` is a hang.
inline std::string Converse(boost::asio::io_context& io, int fd, std::string_view input,
                            std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::string got;
  size_t sent = 0;
  bool write_open = true;
  for (;;) {
    if (io.stopped()) io.restart();  // it stops whenever it runs out of work
    bool progress = io.poll() > 0;
    if (write_open && sent < input.size()) {
      ssize_t n = ::send(fd, input.data() + sent, input.size() - sent, MSG_NOSIGNAL);
      if (n > 0) {
        sent += static_cast<size_t>(n);
        progress = true;
      } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
        write_open = false;  // the server hung up (EPIPE, ECONNRESET)
      }
    }
    if (write_open && sent == input.size()) {
      ::shutdown(fd, SHUT_WR);
      write_open = false;
    }
    char buf[16384];
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n > 0) {
      got.append(buf, static_cast<size_t>(n));
      progress = true;
    } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
      if (io.stopped()) io.restart();
      io.poll();  // let the server finish what it was doing with the connection
      return got;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      Fail("the server neither answered nor closed the connection within " +
           std::to_string(limit.count()) + " ms");
    }
    if (!progress) io.run_one_for(std::chrono::milliseconds(1));
  }
}

}  // namespace ftrun::fuzz
