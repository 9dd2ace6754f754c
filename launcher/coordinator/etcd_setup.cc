// MakeEtcdCoordinator (etcd_coordinator.h): the etcd backend's options from the agent's.
#include "common/log.h"
#include "launcher/coordinator/etcd_coordinator.h"
#include "launcher/coordinator/job_setup.h"
#include "rendezvous/etcd/etcd_conf.h"

namespace ftrun::launcher {

Result<std::unique_ptr<Coordinator>> MakeEtcdCoordinator(boost::asio::io_context& io,
                                                         const LaunchConfig& c, const EnvMap& env,
                                                         const std::string& fqdn,
                                                         const std::string& node_id,
                                                         std::shared_ptr<EventLog> event_log) {
  auto conf = rendezvous::etcd::ResolveEtcdConf(c.rdzv, c.etcd_endpoints, env);
  if (!conf) return conf.error();
  auto client = rendezvous::etcd::EtcdClient::Create(io, conf->client);
  if (!client) return client.error();
  EtcdCoordinatorOptions opts;
  opts.client = std::move(*client);
  opts.keys = rendezvous::etcd::EtcdKeys(conf->prefix, c.run_id);
  opts.job = JobSpecFrom(c);
  // torchrun's etcd backend: `timeout` bounds the whole rendezvous.
  if (c.rdzv.timeout_given) opts.job.join_timeout = c.rdzv.timeout;
  // Liveness is each agent's lease: a node is lost when its key goes, not by silence.
  opts.job.liveness_timeout = rendezvous::Duration(rendezvous::kMaxSeconds);
  opts.job.disconnect_grace = rendezvous::Duration(0);
  opts.lease_ttl = conf->lease_ttl;
  opts.connect_timeout = c.rdzv.timeout;
  opts.role = c.role;
  opts.event_log = std::move(event_log);
  opts.node.node_id = node_id;
  opts.node.addr = c.local_addr.empty() ? fqdn : c.local_addr;
  opts.node.host = fqdn;
  opts.node.node_rank = -1;
  opts.node.nproc_per_node = c.nproc_per_node;
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
