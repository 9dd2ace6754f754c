// Signal names as torchrun prints and parses them ("SIGTERM"), for logs, failure reports and
// --signals-to-handle. Pure; thread-safe.
#pragma once

#include <optional>
#include <string>

namespace ftrun {

// The name of a signal, e.g. "SIGTERM" (SIG<n> when unknown).
std::string SignalName(int sig);
// The number of a signal named "SIGTERM" (upper case, with the SIG prefix); nullopt if unknown.
std::optional<int> SignalNumber(const std::string& name);

}  // namespace ftrun
