// Topology-aware rank order (DLRover's network-topology ordering): each node may carry its
// switch path — the switches above it, nearest first, e.g. "asw-3/psw-0" — and a round orders
// its members so that nodes under the same switches get adjacent group ranks.
//
// Where a node's path comes from (the agent decides, the rendezvous only orders):
//   * FTRUN_SWITCH_PATH in the agent's environment ("asw-3/psw-0"), no central file needed;
//   * --topology-file: lines "<switch> ... <switch> <address>", nearest switch first, the
//     node's address or host name last. DLRover's "asw psw ip" is the two-level case.
//
// Pure functions: no I/O except ReadTopologyFile, no state. Errors are returned with the line
// number and the culprit.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace ftrun::rendezvous {

// At most this many bytes in a path on the wire, and this many switches in it.
inline constexpr size_t kMaxSwitchPathBytes = 512;
inline constexpr size_t kMaxSwitchLevels = 16;

// address or host name -> switch path ("asw-3/psw-0").
using TopologyMap = std::map<std::string, std::string>;

// Parses the --topology-file text; `#` starts a comment, blank lines are skipped. An address
// listed twice with different paths is an error.
Result<TopologyMap> ParseTopology(std::string_view text, const std::string& name);
Result<TopologyMap> ReadTopologyFile(const std::string& path);

// Checks a path given in FTRUN_SWITCH_PATH or received from a peer: '/'-separated switch
// names, printable, no spaces, bounded ("" is valid: no topology known).
Status CheckSwitchPath(std::string_view path);

// The path of the first of `names` (the node's address, host name, FQDN) listed in `map`, or
// "" when none is.
std::string SwitchPathOf(const TopologyMap& map, const std::vector<std::string>& names);

// The ordering key: the switches outermost first, so sorting by it puts nodes of one access
// switch next to each other, and access switches of one spine switch next to each other.
// Nodes without a path ("") sort after every node with one.
std::vector<std::string> TopologyKey(std::string_view path);

}  // namespace ftrun::rendezvous
