// What the rendezvous server checks in a request before it reads it: bounds, printable
// names, the protocol version (wire.h).
#include "rendezvous/credentials.h"
#include "rendezvous/topology.h"
#include "rendezvous/wire.h"

namespace ftrun::rendezvous {

Status CheckLimits(const v1::ReportRequest& req) {
  if (static_cast<size_t>(req.failures_size()) > kMaxFailures) {
    return Error{"report carries " + std::to_string(req.failures_size()) + " failures (limit " +
                 std::to_string(kMaxFailures) + ")"};
  }
  for (const auto& f : req.failures()) {
    if (f.message().size() > kMaxText || f.error_json().size() > kMaxText ||
        f.host().size() > kMaxText || f.error_file().size() > kMaxText) {
      return Error{"report carries a text field over 64 KiB"};
    }
  }
  if (static_cast<size_t>(req.progress_size()) > kMaxProgress) {
    return Error{"report carries " + std::to_string(req.progress_size()) +
                 " rank progress entries (limit " + std::to_string(kMaxProgress) + ")"};
  }
  for (const auto& p : req.progress()) {
    if (p.group().size() > 1024) return Error{"replica group name over 1 KiB"};
  }
  if (req.error().size() > kMaxText) return Error{"report carries an error over 64 KiB"};
  if (auto s = CheckStacksLimits(req); !s) return s;
  if (auto s = CheckFlashLimits(req); !s) return s;
  return CheckResultLimits(req);
}

bool IsPrintable(std::string_view text) {
  for (char c : text) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

Status CheckProtocolVersion(uint32_t version) {
  const std::string v = std::to_string(version), mine = std::to_string(kProtocolVersion);
  if (version > kProtocolVersion) {
    return Error{"this client speaks rendezvous protocol version " + v +
                 ", newer than this server's " + mine +
                 ": run a server (ftrun master, or the agent hosting the rendezvous) of the "
                 "agents' release or newer"};
  }
  if (version < kOldestProtocolVersion) {
    return Error{"this client speaks rendezvous protocol version " + v +
                 ", older than the oldest this server speaks (" +
                 std::to_string(kOldestProtocolVersion) + "; its own is " + mine +
                 "): run agents of the server's release"};
  }
  return {};
}

Status CheckHeader(const v1::RequestHeader& h) {
  if (h.node_id().empty() || h.node_id().size() > kMaxNodeId) {
    return Error{"node id missing or too long"};
  }
  if (!IsPrintable(h.node_id())) return Error{"node id holds bytes that are not printable ASCII"};
  if (h.node_secret().size() > kMaxSecretBytes) return Error{"node secret too long"};
  if (h.token().size() > kMaxToken) return Error{"token too long"};
  return {};
}

Status CheckLimits(const v1::NodeInfo& node) {
  if (node.addr().size() > 1024 || node.host().size() > 1024) {
    return Error{"node address or host name over 1 KiB"};
  }
  // Both are logged and put in other nodes' environments: no control characters.
  if (!IsPrintable(node.addr()) || !IsPrintable(node.host())) {
    return Error{"node address or host name holds bytes that are not printable ASCII"};
  }
  if (node.nproc_per_node() <= 0 || node.nproc_per_node() > 65536) {
    return Error{"nproc_per_node " + std::to_string(node.nproc_per_node()) + " out of range"};
  }
  if (node.free_port() < 0 || node.free_port() > 65535) {
    return Error{"free_port " + std::to_string(node.free_port()) + " out of range"};
  }
  if (node.restart_count() < 0) {
    return Error{"restart_count " + std::to_string(node.restart_count()) + " is negative"};
  }
  if (node.probe_port() < 0 || node.probe_port() > 65535) {
    return Error{"probe_port " + std::to_string(node.probe_port()) + " out of range"};
  }
  if (node.replica_port() < 0 || node.replica_port() > 65535) {
    return Error{"replica_port " + std::to_string(node.replica_port()) + " out of range"};
  }
  if (node.has_last_group_rank() &&
      (node.last_group_rank() < 0 || node.last_group_rank() >= static_cast<int>(kMaxStorePeers))) {
    return Error{"last_group_rank " + std::to_string(node.last_group_rank()) + " out of range"};
  }
  if (node.has_running()) {
    const v1::Assignment& a = node.running();
    if (a.master_addr().size() > 1024 || !IsPrintable(a.master_addr()) || a.master_port() < 0 ||
        a.master_port() > 65535 || a.group_world_size() < 1 || a.group_rank() < 0 ||
        a.group_rank() >= a.group_world_size() || a.base_rank() < 0 || a.world_size() < 1 ||
        a.base_rank() >= a.world_size() || a.restart_count() < 0 || a.replica_key().size() > 256 ||
        a.replica_peers_size() > 4096) {
      return Error{"the running round's assignment is out of range"};
    }
    for (const auto& peer : a.replica_peers()) {
      if (peer.size() > 1024) return Error{"a replica endpoint is longer than 1 KiB"};
    }
  }
  if (auto s = CheckFlashLimits(node); !s) return s;
  return CheckSwitchPath(node.switch_path());
}

}  // namespace ftrun::rendezvous
