#include "launcher/agent/agent_store.h"

#include <algorithm>
#include <boost/asio/ip/address.hpp>
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
  if (auto host = Lookup(env, "FTRUN_AGENT_STORE_HOST"); host && !host->empty()) {
    boost::system::error_code ec;
    boost::asio::ip::make_address(*host, ec);
    if (*host != "*" && ec) {
      return Error{"FTRUN_AGENT_STORE_HOST: expected an IP address of this host or *, got '" +
                   *host + "'"};
    }
    s.host = *host;
  }
  return s;
}

Result<std::unique_ptr<store::StoreServer>> StartAgentStore(boost::asio::io_context& io,
                                                            const LaunchConfig& c,
                                                            const std::string& fqdn,
                                                            AgentStoreSettings settings) {
  const std::string reported = c.local_addr.empty() ? fqdn : c.local_addr;
  // Only node rank 0 is group rank 0 under the static backend: another node on the master's
  // host is probed (and reached) at the address it reports, so it must not bind the master's.
  const bool master = c.backend == RendezvousBackend::kStatic && c.node_rank == 0 &&
                      IsThisHost(c.master_addr, fqdn);
  const std::string where = master ? c.master_addr : reported;
  store::StoreServerOptions o;
  if (!settings.host.empty()) {
    o.address = settings.host == "*" ? "" : settings.host;
  } else if (IsThisHost(where, fqdn)) {
    ListenAddress listen = ListenAddressFor(where);
    o.address = listen.addr;
    if (listen.addr.empty()) {
      LauncherLog()->warn(
          "agent store listens on every address: {} (FTRUN_AGENT_STORE_HOST names the one)",
          listen.why);
    }
  } else {
    LauncherLog()->warn(
        "agent store listens on every address: {} is not an address of this host "
        "(FTRUN_AGENT_STORE_HOST names the one)",
        where);
  }
  o.port = static_cast<uint16_t>(settings.port);
  auto server = store::StoreServer::Listen(io, o);
  if (!server) {
    return Error{server.error().message +
                 (settings.port ? " (FTRUN_AGENT_STORE_PORT)" : std::string()) +
                 (settings.host.empty() ? std::string() : " (FTRUN_AGENT_STORE_HOST)")};
  }
  LauncherLog()->info(
      "agent store listening address={} port={} (the workers' MASTER_PORT when "
      "this node is group rank 0)",
      o.address.empty() ? "*" : o.address, (*server)->port());
  return server;
}

}  // namespace ftrun::launcher
