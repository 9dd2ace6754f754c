#include "launcher/coordinator/job_setup.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <unistd.h>

#include <random>

#include "common/endpoint.h"
#include "common/log.h"
#include "launcher/config/host.h"
#include "launcher/coordinator/endpoint_probe.h"
#include "launcher/coordinator/etcd_coordinator.h"
#include "launcher/coordinator/local_coordinator.h"
#include "launcher/coordinator/remote_coordinator.h"
#include "rendezvous/credentials.h"
#include "rendezvous/rendezvous_server.h"
#include "rendezvous/topology.h"

namespace ftrun::launcher {
namespace {

using rendezvous::Duration;

}  // namespace

rendezvous::JobSpec JobSpecFrom(const LaunchConfig& c) {
  const bool static_ranks = c.backend == RendezvousBackend::kStatic;
  return {
      .run_id = c.run_id,
      .min_nodes = c.min_nodes,
      .max_nodes = c.max_nodes,
      .nproc_per_node = c.nproc_per_node,
      .max_restarts = c.max_restarts,
      .node_unit = c.node_unit,
      .static_ranks = static_ranks,
      .master_addr = static_ranks ? c.master_addr : "",
      .last_call_timeout = c.rdzv.last_call_timeout,
      .join_timeout = static_ranks ? c.rdzv.timeout : c.rdzv.join_timeout,
      .join_timeout_key = static_ranks ? "timeout" : c.rdzv.join_timeout_key,
      .liveness_timeout = c.rdzv.keep_alive_interval * c.rdzv.keep_alive_max_attempt,
      .fault_save = c.fault_save,
      .save_timeout = c.save_timeout,
      .check = CheckSettingsFrom(c.preflight, c.max_nodes),
      .restart_backoff = c.restart_backoff,
      .exclude_after = c.exclude_after,
      .replica_key = "",  // the server makes one
  };
}

namespace {

rendezvous::NodeInfo Node(const LaunchConfig& c, const std::string& fqdn,
                          const std::string& node_id) {
  rendezvous::NodeInfo n;
  n.node_id = node_id;
  n.addr = c.local_addr.empty() ? fqdn : c.local_addr;
  n.host = fqdn;
  n.node_rank = c.backend == RendezvousBackend::kStatic ? c.node_rank : c.declared_node_rank;
  n.nproc_per_node = c.nproc_per_node;
  return n;
}

// The names this node may have in a topology file: its addresses and host names.
std::vector<std::string> OwnNames(const rendezvous::NodeInfo& n) {
  std::vector<std::string> names = {n.addr, n.host, n.host.substr(0, n.host.find('.'))};
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return names;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    char text[INET6_ADDRSTRLEN] = {};
    const int family = i->ifa_addr->sa_family;
    const void* raw =
        family == AF_INET
            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr)
        : family == AF_INET6
            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr)
            : nullptr;
    if (raw != nullptr && inet_ntop(family, raw, text, sizeof(text)) != nullptr) {
      names.emplace_back(text);
    }
  }
  freeifaddrs(list);
  return names;
}

// FTRUN_SWITCH_PATH, else this node's line of --topology-file (none: it sorts last).
std::string SwitchPath(const LaunchConfig& c, const rendezvous::NodeInfo& n) {
  if (!c.switch_path.empty() || c.topology_file.empty()) return c.switch_path;
  std::string path = rendezvous::SwitchPathOf(c.topology, OwnNames(n));
  if (path.empty()) {
    LauncherLog()->warn(
        "this node (addr={} host={}) is not in the topology file {}: it gets the ranks after "
        "the listed nodes",
        n.addr, n.host, c.topology_file);
  } else {
    LauncherLog()->info("topology switch_path={} file={}", path, c.topology_file);
  }
  return path;
}

}  // namespace

rendezvous::CheckSettings CheckSettingsFrom(const PreflightConfig& p, int max_nodes) {
  rendezvous::CheckSettings s;
  s.enabled = p.network_check && max_nodes > 1;  // one node: nothing to pair
  s.bytes = p.bytes;
  s.pair_timeout = p.timeout;
  s.straggler_fraction = p.straggler_fraction;
  s.min_bandwidth_mbps = p.min_bandwidth_mbps;
  s.exclude_stragglers = p.exclude_stragglers;
  s.run_command = !p.command.empty();
  return s;
}

std::string MakeNodeId(const std::string& fqdn) {
  std::random_device rd;
  return fmt::format("{}:{}:{:08x}", fqdn, ::getpid(), rd());
}

Result<std::unique_ptr<Coordinator>> MakeCoordinator(boost::asio::io_context& io,
                                                     const LaunchConfig& c, const EnvMap& env,
                                                     const std::string& fqdn,
                                                     const std::string& node_id,
                                                     std::shared_ptr<EventLog> event_log,
                                                     int store_port, ReplicaService* replicas) {
  if (c.max_nodes == 1) {
    LocalCoordinatorOptions local{JobSpecFrom(c), Node(c, fqdn, node_id), c.role};
    local.node.node_rank = local.job.static_ranks ? 0 : -1;
    local.store_port = store_port;
    return std::unique_ptr<Coordinator>(std::make_unique<LocalCoordinator>(io, std::move(local)));
  }
  if (c.backend == RendezvousBackend::kEtcd) {
    auto node = Node(c, fqdn, node_id);
    node.switch_path = SwitchPath(c, node);
    return MakeEtcdCoordinator(io, c, env, std::move(node), event_log, store_port, replicas);
  }
  auto log = LauncherLog();
  RemoteCoordinatorOptions opts;
  opts.role = c.role;
  opts.node = Node(c, fqdn, node_id);
  opts.node.switch_path = SwitchPath(c, opts.node);
  opts.store_port = store_port;
  opts.connect_timeout = c.rdzv.timeout;
  opts.lost_after = c.rdzv.keep_alive_interval * c.rdzv.keep_alive_max_attempt;
  opts.watch_wait = c.rdzv.keep_alive_interval;
  rendezvous::ClientOptions& client = opts.client;
  client.target = Endpoint{c.endpoint_host, c.endpoint_port}.ToString();
  client.run_id = c.run_id;
  auto security = rendezvous::ResolveSecurity(c.rdzv, env);
  if (!security) return security.error();
  client.token = security->token;
  client.tls = security->tls;
  client.node_id = opts.node.node_id;
  client.min_nodes = c.min_nodes;
  client.max_nodes = c.max_nodes;
  client.call_timeout = std::min<Duration>(c.rdzv.read_timeout, Duration(10));

  if (replicas != nullptr) {
    // Only this node's reported address: the peers reach it there and nowhere else.
    if (auto port = replicas->Listen(opts.node.addr)) {
      opts.node.replica_port = *port;
    } else {
      log->warn("flash-checkpoint replicas are off on this node: {}", port.error().message);
    }
  }
  if (c.preflight.network_check) {
    // The others reach it at this node's address (node.addr): that address only, when it is
    // one of this host's (else every address).
    const std::string listen =
        IsThisHost(opts.node.addr, fqdn) ? ListenAddressFor(opts.node.addr).addr : "";
    auto probe = ProbeServer::Listen(io, listen, static_cast<uint16_t>(c.preflight.probe_port));
    if (!probe) return Error{probe.error().message + " (--network-check-port)"};
    opts.node.probe_port = (*probe)->port();
    opts.probe_server = std::move(*probe);
  }
  const bool is_static = c.backend == RendezvousBackend::kStatic;
  const bool explicit_host = c.rdzv.is_host.has_value();
  const bool by_address = !is_static || c.host_by_address;
  const bool host =
      by_address ? c.rdzv.is_host.value_or(IsThisHost(c.endpoint_host, fqdn)) : c.node_rank == 0;
  // static: the --master-addr/--master-port pair, unless --rdzv-endpoint replaced it.
  const std::string what = (c.host_by_address ? std::string("the master node's rendezvous ")
                            : is_static       ? std::string("the rendezvous of node rank 0 at ")
                                              : std::string("--rdzv-endpoint ")) +
                           Endpoint{c.endpoint_host, c.endpoint_port}.ToString();
  if (!host) {
    const EndpointProbe probe =
        ProbeEndpoint(c.endpoint_host, c.endpoint_port, client.tls.enabled());
    if (auto usable = EndpointUsable(probe, what); !usable) return usable.error();
    if (probe.look == EndpointLook::kNotListening) {
      // The join's own errors only say that its deadline passed: say once what it waits for.
      log->info("nothing answers at {} yet ({}); waiting for the rendezvous to start", what,
                probe.detail);
    }
  }
  if (host) {
    rendezvous::ServerOptions so;
    // Only the endpoint's address: a localhost endpoint is not reachable from elsewhere.
    const ListenAddress listen = ListenAddressFor(c.endpoint_host);
    if (!listen.why.empty()) {
      log->warn("the rendezvous server listens on every address: {}", listen.why);
    }
    so.listen_host = listen.addr;
    so.port = c.endpoint_port;
    so.job = JobSpecFrom(c);
    so.token = client.token;
    so.tls = client.tls;
    so.max_watches_per_peer = static_cast<size_t>(c.rdzv.max_watches_per_peer);
    so.max_watch_wait = Duration(10);
    so.event_log = event_log;
    auto server = std::make_unique<rendezvous::RendezvousServer>(io, so);
    auto port = server->Start();
    if (port) {
      const bool v6 = listen.addr.find(':') != std::string::npos;
      client.target = (listen.addr.empty() ? "127.0.0.1"
                       : v6                ? "[" + listen.addr + "]"
                                           : listen.addr) +
                      ":" + std::to_string(*port);
      // The certificate names the endpoint, not the address this agent reaches it by.
      if (client.tls.enabled()) client.tls_target_name = c.endpoint_host;
      opts.server = std::move(server);
    } else if (!by_address || explicit_host) {
      return Error{port.error().message + (!by_address ? " (--master-port, node rank 0)"
                                           : c.host_by_address
                                               ? " (ftrun's rendezvous port on the master node)"
                                               : " (--rdzv-endpoint, is_host=1)")};
    } else {
      // Several agents on one host: the first one hosts, the others join it; unless what
      // holds the port is not a rendezvous at all.
      const std::string local = listen.addr.empty() ? "127.0.0.1" : listen.addr;
      auto usable = EndpointUsable(ProbeEndpoint(local, c.endpoint_port, client.tls.enabled()),
                                   what + " (" + port.error().message + ")");
      if (!usable) return usable.error();
      log->info("{}; another agent on this host serves the rendezvous, joining it",
                port.error().message);
    }
  }
  return std::unique_ptr<Coordinator>(std::make_unique<RemoteCoordinator>(io, std::move(opts)));
}

}  // namespace ftrun::launcher
