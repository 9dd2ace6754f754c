// EtcdCoordinator: a node of a job whose rendezvous lives in etcd (--rdzv-backend etcd,
// etcd-v2, etcd-v3; rendezvous/etcd/etcd_keys.h has the layout). No daemon but etcd:
//   * this agent's liveness is its own lease (lease_ttl), kept alive every third of it;
//   * it joins by writing its node key, reports by writing report keys (in order, one in
//     flight) and learns the job by watching its view key; its flash-checkpoint inventory
//     goes in the node key and in every stopped report (the leader's restore step counts it);
//   * with the agent store, it checks the other members' stores while its workers run and
//     reports one it cannot reach (MemberStoreChecks: a partition the leader names);
//   * one agent at a time holds the leader key (created only if absent, bound to its lease)
//     and runs the state machine (EtcdLeader); when the leader is lost its key goes with its
//     lease and the others campaign again; the winner carries the job on from the nodes'
//     claims (their next round and restarts spent, refreshed in their node keys).
// etcd members: the client fails over between the --rdzv-endpoint members.
//
// Thread: loop only; Listener calls are posted or in completions, never inside a Coordinator
// call. Errors: etcd unreachable at start for connect_timeout, or unreachable later for longer
// than the lease TTL, or this agent's lease lost, ends the job with a reason naming it.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "common/environment.h"
#include "common/event_log.h"
#include "common/result.h"
#include "launcher/config/launch_config.h"
#include "launcher/coordinator/coordinator.h"
#include "launcher/coordinator/member_store_checks.h"
#include "launcher/coordinator/view_follower.h"
#include "launcher/netcheck/pair_probe.h"
#include "rendezvous/etcd/etcd_client.h"
#include "rendezvous/etcd/etcd_keys.h"
#include "rendezvous/etcd/etcd_leader.h"
#include "rendezvous/etcd/etcd_watch.h"

namespace ftrun::launcher {

class ReplicaService;

struct EtcdCoordinatorOptions {
  std::unique_ptr<rendezvous::etcd::EtcdClient> client;
  rendezvous::etcd::EtcdKeys keys{"/ftrun/rdzv", "none"};
  rendezvous::JobSpec job;  // what this agent runs when it leads
  rendezvous::NodeInfo node;
  int lease_ttl = 5;                          // seconds
  rendezvous::Duration connect_timeout{900};  // etcd not reachable yet
  rendezvous::Duration linger{10};            // leading: wait for every node to see the end
  std::unique_ptr<ProbeServer> probe_server;  // --network-check: answers the other agents
  std::string role = "default";
  std::shared_ptr<EventLog> event_log;  // leading: the state machine's records (may be null)
  int store_port = 0;                   // > 0: every join's and stop's free_port (agent store)
  StoreProbeOptions store_probe;        // partition checks, when store_port > 0
};

class EtcdCoordinator : public Coordinator {
 public:
  EtcdCoordinator(boost::asio::io_context& io, EtcdCoordinatorOptions options);
  ~EtcdCoordinator() override;

  void Start(Listener* listener) override;
  void WorkersStopped() override;
  void Shutdown() override;
  // The leader logs only transitions; every agent logs the network check's table itself.
  bool HostsRendezvous() const override { return false; }
  bool leading() const { return leader_ != nullptr; }

 private:
  void Report(rendezvous::RoundReport report) override;

  void Grant();
  void KeepAlive();
  void PutNode();
  void Follow();
  void OnView(const std::string& value);
  void OnLeaderEvent(bool deleted);
  void Campaign();
  void SendReport();
  void RefreshClaims();
  void CheckStores();  // partition checks follow the round this node runs
  bool Contact(const rendezvous::etcd::EtcdStatus& st);  // false: not ok
  void Fail(const std::string& reason);
  void Revoke();
  void After(boost::asio::steady_timer& timer, rendezvous::Duration delay,
             std::function<void()> what);
  uint64_t CurrentRound() const;
  std::string Where() const;

  boost::asio::io_context& io_;
  EtcdCoordinatorOptions opts_;
  std::optional<ViewFollower> follower_;
  std::unique_ptr<rendezvous::etcd::EtcdLeader> leader_;
  std::optional<MemberStoreChecks> store_checks_;

  // State below is touched only on the loop.
  boost::asio::steady_timer start_timer_;
  boost::asio::steady_timer keepalive_timer_;
  boost::asio::steady_timer report_timer_;
  std::unique_ptr<rendezvous::etcd::EtcdWatch> watches_[2];  // my view, the leader key
  rendezvous::TimePoint started_;
  int wait_logs_ = 0;  // "waiting for etcd" lines so far (one per 10 s, not per attempt)
  rendezvous::TimePoint last_contact_;
  int64_t lease_id_ = 0;
  bool followed_ = false;
  bool campaigning_ = false;
  uint64_t known_version_ = 0;
  std::deque<rendezvous::RoundReport> reports_;
  bool report_in_flight_ = false;
  uint64_t report_seq_ = 0;
  uint64_t claimed_round_ = 0;
  int claimed_restarts_ = 0;
  bool shutting_down_ = false;
  bool failed_ = false;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

// Builds it from the agent's options (--rdzv-endpoint's members, --rdzv-conf's etcd keys and
// the environment's credentials) and this node's description. `store_port` > 0: the agent
// store's port, reported as the node's free_port (the workers' MASTER_PORT when it leads the
// round); else a port free at the time. `replicas` (may be null): this node's flash-checkpoint
// replica service, started here on the node's address; when this agent leads, the rounds
// carry its replica key. Blocking (DNS, files) at start-up only.
Result<std::unique_ptr<Coordinator>> MakeEtcdCoordinator(
    boost::asio::io_context& io, const LaunchConfig& config, const EnvMap& env,
    rendezvous::NodeInfo node, std::shared_ptr<EventLog> event_log, int store_port,
    ReplicaService* replicas = nullptr);

}  // namespace ftrun::launcher
