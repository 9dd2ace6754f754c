#include "launcher/replica/replica_service.h"

#include "common/log.h"
#include "launcher/checkpoint/snapshot_store.h"

namespace ftrun::launcher {

ReplicaService::ReplicaService(boost::asio::io_context& io, Options options)
    : opts_(std::move(options)),
      store_(opts_.budget_bytes),
      server_(io, store_,
              ReplicaServer::Options{
                  .tls = opts_.tls, .direct = opts_.direct, .ticket_ttl = opts_.ticket_ttl}),
      pusher_(io,
              ReplicaPusher::Options{.from = opts_.host,
                                     .tls = opts_.tls,
                                     .tls_target_name = opts_.tls_target_name,
                                     .direct = opts_.direct},
              [this](const std::string& target, const std::string& group, uint64_t step,
                     const Status& outcome,
                     double seconds) { Copied(target, group, step, outcome, seconds); }) {
  server_.OnStored([this](const ReplicaView& view, double seconds) { Stored(view, seconds); });
}

ReplicaService::~ReplicaService() = default;

void ReplicaService::Stored(const ReplicaView& view, double seconds) {
  // A copy arrives with every save: at info only when a shard's holder changes.
  auto& from = holding_[view.group];
  const auto level = from == view.from ? spdlog::level::debug : spdlog::level::info;
  from = view.from;
  LauncherLog()->log(level, "replica of {} step={} stored from {} ({} bytes in {:.3f}s)",
                     view.group, view.step, rendezvous::Printable(view.from, 64), view.bytes,
                     seconds);
}

Result<int> ReplicaService::Listen(const std::string& addr) {
  return server_.Start(addr.empty() ? "127.0.0.1" : addr);
}

void ReplicaService::RoundStarted(const rendezvous::NodeAssignment& a) {
  server_.SetKey(a.replica_key);
  std::vector<std::string> targets;
  const int n = static_cast<int>(a.replica_peers.size());
  std::vector<int> order = a.replica_order;  // under a different switch first
  if (order.empty()) {                       // an older server: the nodes after this one
    for (int i = 1; i < n; ++i) order.push_back((a.group_rank + i) % n);
  }
  for (size_t i = 0; i < order.size() && static_cast<int>(targets.size()) < opts_.copies - 1; ++i) {
    if (order[i] < 0 || order[i] >= n || order[i] == a.group_rank) continue;
    const std::string& peer = a.replica_peers[static_cast<size_t>(order[i])];
    if (!peer.empty()) targets.push_back(peer);
  }
  LauncherLog()->info("replicas: round={} copies={} targets=[{}]", a.round, opts_.copies,
                      fmt::join(targets, ","));
  pusher_.SetTargets(std::move(targets), a.replica_key);
}

void ReplicaService::Committed(const SnapshotView& view) {
  if (IsShardGroup(view.meta.group)) pusher_.Offer(view);
}

void ReplicaService::Shutdown() { server_.Shutdown(); }

Result<std::unique_ptr<ReplicaService>> MakeReplicaService(boost::asio::io_context& io,
                                                           const LaunchConfig& config,
                                                           const EnvMap& env,
                                                           const std::string& host) {
  if (config.max_nodes == 1 || config.flash_replicas <= 1) {
    return std::unique_ptr<ReplicaService>();
  }
  auto security = rendezvous::ResolveSecurity(config.rdzv, env);
  if (!security) return security.error();
  // An escape hatch (a network that lets only the replica port through; comparing the paths).
  const auto direct = EnvSwitch(env, "FTRUN_FLASH_REPLICA_DIRECT", true);
  if (!direct) return direct.error();
  ReplicaService::Options o{
      .budget_bytes = FlashMemoryBudget(config),
      .copies = config.flash_replicas,
      .host = host,
      .tls = security->tls,
      // The peers' certificates are the job's, issued for the rendezvous endpoint.
      .tls_target_name = security->tls.enabled() ? config.endpoint_host : "",
      .direct = *direct};
  return std::make_unique<ReplicaService>(io, std::move(o));
}

void ReplicaService::Copied(const std::string& target, const std::string& group, uint64_t step,
                            const Status& outcome, double seconds) {
  if (on_copied_) on_copied_(target, group, step, outcome, seconds);
  if (outcome) {
    if (failing_.erase(target) > 0)
      LauncherLog()->info("replicas: copies to {} work again", target);
    LauncherLog()->debug("replica of {} step={} at {} after {:.3f}s", group, step, target, seconds);
    return;
  }
  // Every commit would log it again: once per target until a copy gets through.
  if (failing_.insert(target).second) {
    LauncherLog()->warn("replicas: {}; training goes on (the next snapshot is tried)",
                        outcome.error().message);
  } else {
    LauncherLog()->debug("replicas: {}", outcome.error().message);
  }
}

}  // namespace ftrun::launcher
