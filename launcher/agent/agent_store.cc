#include "launcher/agent/agent_store.h"

#include <algorithm>
#include <cctype>

#include "common/log.h"
#include "launcher/config/host.h"
#include "launcher/workers/worker_env.h"

namespace ftrun::launcher {

Result<AgentStoreSettings> AgentStoreSettingsFrom(const EnvMap& env) {
  AgentStoreSettings s;
  s.enabled = AgentStoreEnabled(env);
  if (auto port = Lookup(env, "FTRUN_AGENT_STORE_PORT"); port && !port->empty()) {
    const bool digits = std::all_of(port->begin(), port->end(),
                                    [](unsigned char c) { return std::isdigit(c) != 0; });
    const long v = digits && port->size() <= 5 ? std::stol(*port) : -1;
    if (v < 1 || v > 65535) {
      return Error{"FTRUN_AGENT_STORE_PORT: expected a port from 1 to 65535, got '" + *port + "'"};
    }
    s.port = static_cast<int>(v);
  }
  return s;
}

Result<std::unique_ptr<store::StoreServer>> StartAgentStore(boost::asio::io_context& io,
                                                            const LaunchConfig& c,
                                                            const std::string& fqdn,
                                                            AgentStoreSettings settings) {
  const std::string master_addr = c.backend == RendezvousBackend::kStatic ? c.master_addr
                                  : c.local_addr.empty()                  ? fqdn
                                                                          : c.local_addr;
  store::StoreServerOptions o;
  // Not this host's address (static, node rank > 0): every address, as this node leads no
  // round then unless it takes over group rank 0.
  o.address = IsThisHost(master_addr, fqdn) ? ListenAddressFor(master_addr).addr : "";
  o.port = static_cast<uint16_t>(settings.port);
  auto server = store::StoreServer::Listen(io, o);
  if (!server) {
    return Error{server.error().message +
                 (settings.port ? " (FTRUN_AGENT_STORE_PORT)" : std::string())};
  }
  LauncherLog()->info(
      "agent store listening address={} port={} (the workers' MASTER_PORT when "
      "this node is group rank 0)",
      o.address.empty() ? "*" : o.address, (*server)->port());
  return server;
}

}  // namespace ftrun::launcher
