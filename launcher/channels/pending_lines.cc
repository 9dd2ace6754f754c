#include "launcher/channels/pending_lines.h"

#include <sys/socket.h>

#include <algorithm>
#include <boost/asio/buffers_iterator.hpp>
#include <cerrno>

namespace ftrun::launcher {
namespace {

// The complete lines `buffer` holds, each consumed before `on_line` sees it.
std::string TakeLines(boost::asio::streambuf& buffer,
                      const std::function<std::string(const std::string&)>& on_line) {
  for (;;) {
    auto data = buffer.data();
    auto begin = boost::asio::buffers_begin(data);
    auto end = boost::asio::buffers_end(data);
    auto newline = std::find(begin, end, '\n');
    if (newline == end) return "";
    std::string line(begin, newline);
    buffer.consume(line.size() + 1);
    if (std::string err = on_line(line); !err.empty()) return err;
  }
}

}  // namespace

std::string ReadPendingLines(int fd, boost::asio::streambuf& buffer, size_t max_line, size_t limit,
                             const std::function<std::string(const std::string&)>& on_line) {
  size_t total = 0;
  for (;;) {
    if (std::string err = TakeLines(buffer, on_line); !err.empty()) return err;
    if (buffer.size() > max_line) {
      return "message over " + std::to_string(max_line / 1024) + " KiB";
    }
    const size_t room = std::min(buffer.max_size() - buffer.size(), limit - total);
    if (room == 0) return "";
    auto space = buffer.prepare(room);
    ssize_t n;
    do {
      n = ::recv(fd, space.data(), space.size(), MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    if (n <= 0) return "";  // end of stream, nothing more, or an error: all there is was read
    buffer.commit(static_cast<size_t>(n));
    total += static_cast<size_t>(n);
  }
}

}  // namespace ftrun::launcher
