// ReplicaService: flash-checkpoint replicas for one agent (ftrun-flash-checkpoint(7),
// "Replicas"). It owns the three parts, wires them to the round, and decides placement:
//   ReplicaStore  - the copies of other nodes' shards this node keeps;
//   ReplicaServer - receives them (key-checked, bounded);
//   ReplicaPusher - sends this node's newest shard snapshots.
// Placement: with `copies` = replica_count (2: one copy elsewhere), a node's shards go to the
// first replica_count - 1 serving members of the round's replica order: nodes under a
// different switch first when the topology is known (rendezvous/flash_plan.h ReplicaOrder),
// then the nodes after it in group-rank order (wrapping; also what an older server means).
//
// Thread: loop only. Ownership: `io` outlives it. Errors: Listen's Result; copies' failures are
// logged (the first failure to a target at warn, until it succeeds again).
#pragma once

#include <boost/asio/io_context.hpp>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "common/environment.h"
#include "common/result.h"
#include "launcher/checkpoint/snapshot_store.h"
#include "launcher/config/launch_config.h"
#include "launcher/replica/replica_pusher.h"
#include "launcher/replica/replica_server.h"
#include "launcher/replica/replica_store.h"
#include "rendezvous/assignment.h"

namespace ftrun::launcher {

class ReplicaService {
 public:
  struct Options {
    uint64_t budget_bytes = 0;  // for the copies this node keeps
    int copies = 2;             // replica_count: copies of each shard, its own included
    std::string host;           // this node's name in the peers' logs
    rendezvous::TlsConfig tls;
    std::string tls_target_name;
    bool direct = true;  // offer the direct path to senders (ReplicaServer::Options)
    std::chrono::milliseconds ticket_ttl{10000};
  };

  ReplicaService(boost::asio::io_context& io, Options options);
  ~ReplicaService();
  ReplicaService(const ReplicaService&) = delete;
  ReplicaService& operator=(const ReplicaService&) = delete;

  // Starts receiving on an ephemeral port of `addr` (the address reported to the rendezvous).
  Result<int> Listen(const std::string& addr);
  // A round began: its replica key, and the targets of this node's copies.
  void RoundStarted(const rendezvous::NodeAssignment& assignment);
  // A local snapshot committed: a shard ("rank-<r>") is copied to the targets; others ignored.
  void Committed(const SnapshotView& view);
  void Shutdown();
  // Also told of every copy's outcome (tests, scripts/bench.py's figure through the log).
  void OnCopied(ReplicaPusher::Copied copied) { on_copied_ = std::move(copied); }

  const ReplicaStore& store() const { return store_; }
  ReplicaServer& server() { return server_; }

 private:
  void Copied(const std::string& target, const std::string& group, uint64_t step,
              const Status& outcome, double seconds);

  Options opts_;
  ReplicaStore store_;
  ReplicaServer server_;
  void Stored(const ReplicaView& view, double seconds);

  std::set<std::string> failing_;               // targets whose last copy failed (logged once)
  std::map<std::string, std::string> holding_;  // group -> the sender of its newest replica
  ReplicaPusher::Copied on_copied_;
  ReplicaPusher pusher_;  // last: its thread stops first
};

// The agent's replica service, not yet listening: null when this job has none (one node,
// --flash-replicas 1). TLS as the rendezvous' (--rdzv-conf, FTRUN_RDZV_TLS_*); an error names
// the setting at fault.
Result<std::unique_ptr<ReplicaService>> MakeReplicaService(boost::asio::io_context& io,
                                                           const LaunchConfig& config,
                                                           const EnvMap& env,
                                                           const std::string& host);

}  // namespace ftrun::launcher
