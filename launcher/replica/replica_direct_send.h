// SendDirect: the sending half of a replica copy's direct path (replica.proto, Reserve; the
// receiving half is replica_data_port.h). With the ticket a Reserve answered, it connects to
// the receiver's data port, writes the ticket, the snapshot's bytes straight from its memfd
// (sendfile: they never pass through this process) and the CRC-32C trailer, and reads the
// receiver's answer.
//
// The trailer's checksum is asked for only after the bytes were sent (`last_checksum`); when it
// answers nullopt (the snapshot was superseded meanwhile) the copy is given up: the connection
// is closed before the trailer, which the receiver takes as exactly that, and SendDirect
// returns once the receiver has closed too, or after 2 s (so its abort reaches the receiver's
// loop before any newer copy's admission).
//
// Deadline: the connect gets at most 2 s (an address that drops packets must leave time for
// the stream); each send the time left until `deadline`; the receiver's answer at least 2 s.
// `watch` is called with the socket before the connect (false: the caller is stopping, no
// connect is tried) and with -1 when it is closed, so another thread may shut it down to cut
// the copy short.
//
// Thread: the caller's (blocking); SIGPIPE must be blocked or ignored in it. Errors: in the
// result, naming the step.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace ftrun::launcher {

enum class DirectOutcome {
  kStored,        // the receiver stored the copy
  kNotConnected,  // the data port was not reached (or refused the ticket's write): the stream
                  // may go instead
  kFailed,        // refused, broken off, out of time
  kGivenUp,       // last_checksum said no
};

struct DirectResult {
  DirectOutcome outcome = DirectOutcome::kFailed;
  std::string detail;  // why, when not stored
};

DirectResult SendDirect(const std::string& host, int port, const std::string& ticket, int memfd,
                        size_t bytes, std::chrono::system_clock::time_point deadline,
                        const std::function<std::optional<uint32_t>()>& last_checksum,
                        const std::function<bool(int fd)>& watch);

}  // namespace ftrun::launcher
