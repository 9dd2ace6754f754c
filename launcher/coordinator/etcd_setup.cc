// MakeEtcdCoordinator (etcd_coordinator.h): the etcd backend's options from the agent's.
#include "common/log.h"
#include "launcher/coordinator/etcd_coordinator.h"
#include "launcher/coordinator/job_setup.h"
#include "launcher/replica/replica_service.h"
#include "rendezvous/credentials.h"
#include "rendezvous/etcd/etcd_conf.h"

namespace ftrun::launcher {

Result<std::unique_ptr<Coordinator>> MakeEtcdCoordinator(boost::asio::io_context& io,
                                                         const LaunchConfig& c, const EnvMap& env,
                                                         rendezvous::NodeInfo node,
                                                         std::shared_ptr<EventLog> event_log,
                                                         int store_port, ReplicaService* replicas) {
  auto conf = rendezvous::etcd::ResolveEtcdConf(c.rdzv, c.etcd_endpoints, env);
  if (!conf) return conf.error();
  auto client = rendezvous::etcd::EtcdClient::Create(io, conf->client);
  if (!client) return client.error();
  EtcdCoordinatorOptions opts;
  opts.client = std::move(*client);
  opts.keys = rendezvous::etcd::EtcdKeys(conf->prefix, c.run_id);
  opts.job = JobSpecFrom(c);
  // Liveness is each agent's lease: a node is lost when its key goes, not by silence.
  opts.job.liveness_timeout = rendezvous::Duration(rendezvous::kMaxSeconds);
  opts.job.disconnect_grace = rendezvous::Duration(0);
  opts.lease_ttl = conf->lease_ttl;
  opts.connect_timeout = c.rdzv.timeout;
  opts.role = c.role;
  opts.event_log = std::move(event_log);
  opts.node = std::move(node);
  opts.store_port = store_port;
  if (replicas != nullptr) {
    // Whichever agent leads hands out its own key: a round formed by a new leader carries
    // the new one, and every member sets it as the round starts.
    opts.job.replica_key = rendezvous::NewSecret();
    if (auto port = replicas->Listen(opts.node.addr)) {
      opts.node.replica_port = *port;
    } else {
      LauncherLog()->warn("flash-checkpoint replicas are off on this node: {}",
                          port.error().message);
    }
  }
  if (c.preflight.network_check) {
    auto probe = ProbeServer::Listen(io, "", static_cast<uint16_t>(c.preflight.probe_port));
    if (!probe) return Error{probe.error().message + " (--network-check-port)"};
    opts.node.probe_port = (*probe)->port();
    opts.probe_server = std::move(*probe);
  }
  LauncherLog()->info("rendezvous in etcd endpoints={} prefix={} lease_ttl={}s",
                      opts.client->endpoints_text(), opts.keys.root, opts.lease_ttl);
  return std::unique_ptr<Coordinator>(std::make_unique<EtcdCoordinator>(io, std::move(opts)));
}

}  // namespace ftrun::launcher
