// Where a job's rendezvous lives in etcd, under <prefix>/<run id>/ (prefix: --rdzv-conf
// etcd_prefix, default /ftrun/rdzv):
//   leader            the agent that runs the state machine now (value: its node id; bound to
//                     its lease; created only if absent, in a transaction)
//   nodes/<node id>   a joined agent (value: ftrun.v1.NodeInfo; bound to the agent's lease, so
//                     it vanishes when the agent is lost or leaves)
//   reports/<node id>/<seq, 16 hex digits>
//                     one of the agent's reports (ftrun.v1.ReportRequest), in order; bound to
//                     the agent's lease; deleted by the leader once applied
//   views/<node id>   what the job says to that agent (ftrun.v1.NodeView); written only by the
//                     leader, in transactions guarded by its leader key; bound to its lease
// Every key is bound to a lease: a crashed job leaves nothing once its leases expire.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>

namespace ftrun::rendezvous::etcd {

struct EtcdKeys {
  std::string root;  // "<prefix>/<run id>/"

  EtcdKeys(const std::string& prefix, const std::string& run_id)
      : root((prefix.empty() || prefix.back() != '/' ? prefix + "/" : prefix) + run_id + "/") {}

  std::string leader() const { return root + "leader"; }
  std::string nodes() const { return root + "nodes/"; }
  std::string node(const std::string& id) const { return nodes() + id; }
  std::string reports() const { return root + "reports/"; }
  std::string report(const std::string& id, uint64_t seq) const {
    return fmt::format("{}{}/{:016x}", reports(), id, seq);
  }
  std::string views() const { return root + "views/"; }
  std::string view(const std::string& id) const { return views() + id; }

  // The node id in a key under nodes/, views/ or reports/ ("" when the key is not one).
  static std::string NodeOf(const std::string& key, const std::string& dir) {
    if (key.compare(0, dir.size(), dir) != 0) return "";
    std::string rest = key.substr(dir.size());
    auto slash = rest.rfind('/');
    return slash == std::string::npos ? rest : rest.substr(0, slash);
  }
};

// A view's version as agents compare it: the leader's epoch (its leader key's create
// revision) above the state machine's version, so a new leader's views supersede the old's.
inline uint64_t EpochVersion(int64_t epoch, uint64_t state_version) {
  return (static_cast<uint64_t>(epoch) << 24) + state_version;
}

}  // namespace ftrun::rendezvous::etcd
