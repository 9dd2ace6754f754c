// Chooses and builds the coordinator that fits the job's shape:
//   --nnodes 1 (and --standalone): LocalCoordinator, the rendezvous state machine in-process;
//   several nodes: RemoteCoordinator, hosting the rendezvous server when this node owns the
//   rendezvous address (static: --node-rank 0 on --master-port; c10d: --rdzv-endpoint names
//   this host, or is_host=1), else joining it.
// Blocking (DNS, binding) at start-up only. Errors name the culprit (e.g. the port in use).
#pragma once

#include <boost/asio/io_context.hpp>
#include <memory>
#include <string>

#include "common/environment.h"
#include "common/event_log.h"
#include "common/result.h"
#include "launcher/config/launch_config.h"
#include "launcher/coordinator/coordinator.h"
#include "launcher/replica/replica_service.h"
#include "rendezvous/rendezvous_state.h"

namespace ftrun::launcher {

// `replicas` (may be null): started on this node's reported address, its port reported at
// join (the built-in rendezvous only; etcd and single-node jobs have no replicas).
// `node_id` names this agent (MakeNodeId); `event_log` (may be null) also receives the
// hosted rendezvous server's events. `store_port`: the agent store's port, this node's
// MASTER_PORT in every round it leads (0: a port found free for each round).
Result<std::unique_ptr<Coordinator>> MakeCoordinator(
    boost::asio::io_context& io, const LaunchConfig& config, const EnvMap& env,
    const std::string& fqdn, const std::string& node_id, std::shared_ptr<EventLog> event_log,
    int store_port = 0, ReplicaService* replicas = nullptr);

// The job as the rendezvous state machine sees it, from the agent's options.
rendezvous::JobSpec JobSpecFrom(const LaunchConfig& config);

// The rendezvous server's network-check settings from the agents' options.
rendezvous::CheckSettings CheckSettingsFrom(const PreflightConfig& p, int max_nodes);

// A node id unique to this agent process: <fqdn>:<pid>:<random>.
std::string MakeNodeId(const std::string& fqdn);

}  // namespace ftrun::launcher
