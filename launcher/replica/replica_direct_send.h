// SendDirect: the sending half of a replica copy's direct path (replica.proto, Reserve; the
// receiving half is replica_data_port.h). With the ticket a Reserve answered, it connects to
// the receiver's data port, writes the ticket, the snapshot's bytes straight from its memfd
// (sendfile: they never pass through this process) and the CRC-32C trailer, and reads the
// receiver's answer.
//
// The trailer's checksum is asked for only after the bytes were sent (`last_checksum`); when it
// answers nullopt (the snapshot was superseded meanwhile) the copy is given up: the connection
// is closed before the trailer, which the receiver takes as exactly that, and SendDirect
// returns once the receiver has closed too (so its abort reaches the receiver's loop before
// any newer copy's admission).
//
// Deadline: every step (connect, each send, the answer) gets the time left until `deadline`.
// `watch` is called with the socket before the connect and with -1 when it is closed, so
// another thread may shut it down to cut the copy short.
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
  kNotConnected,  // no byte left this node (the data port unreachable): the stream may go
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
                        const std::function<void(int fd)>& watch);

}  // namespace ftrun::launcher
