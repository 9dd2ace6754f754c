// ReadPendingLines: what a dead process left in its end of a stream socket, read at once and
// without blocking, line by line. A worker killed right after it sent a message (a flash
// checkpoint's commit that waits for no answer, say) has its bytes in the agent's socket
// buffer; reading them before acting on the exit keeps that message.
//
// Bounded: reads at most `limit` bytes in all; a line longer than `max_line` stops it with
// "message over N KiB". `buffer` holds what an earlier read left (complete lines first), and
// keeps an incomplete tail. Thread: the caller's; the descriptor is only read with
// MSG_DONTWAIT, so it never blocks.
#pragma once

#include <boost/asio/streambuf.hpp>
#include <cstddef>
#include <functional>
#include <string>

namespace ftrun::launcher {

// Calls `on_line` for each complete line (without its newline) until the socket has nothing
// more, end of stream, `limit` bytes, or `on_line` returns a non-empty error, which it returns.
std::string ReadPendingLines(int fd, boost::asio::streambuf& buffer, size_t max_line, size_t limit,
                             const std::function<std::string(const std::string&)>& on_line);

}  // namespace ftrun::launcher
