// The agent's c10d store for the workers' process group (store/store_server.h): what torchrun
// 1.13 hosts in its agent for the static backend, here for every backend. Every agent opens
// one at start-up, on an ephemeral port held for the whole job (or FTRUN_AGENT_STORE_PORT),
// and reports that port to the rendezvous as its MASTER_PORT candidate; the workers of each
// round use the group-rank-0 agent's store, with TORCHELASTIC_USE_AGENT_STORE=True, so none
// of them has to wait for worker rank 0 to create one.
//
// FTRUN_AGENT_STORE=0 turns it off (for a torch whose store protocol this one does not speak):
// then worker rank 0 hosts torch's store on a port picked for each round, as before.
//
// Blocking: no (binding only). Thread: loop only.
#pragma once

#include <boost/asio/io_context.hpp>
#include <memory>
#include <string>
#include <string_view>

#include "common/environment.h"
#include "common/result.h"
#include "launcher/config/launch_config.h"
#include "store/store_server.h"

namespace ftrun::launcher {

struct AgentStoreSettings {
  bool enabled = true;
  int port = 0;      // 0: ephemeral
  std::string host;  // an IP literal, or "*" (every address); "": the address the agent reports
};

// From FTRUN_AGENT_STORE (0/false/off/no: off), FTRUN_AGENT_STORE_PORT (1-65535) and
// FTRUN_AGENT_STORE_HOST (an IP address, or *). Errors name the variable and its value.
Result<AgentStoreSettings> AgentStoreSettingsFrom(const EnvMap& env);

// Listens where the other nodes reach this node's store: where its workers are told MASTER_ADDR
// is when it is group rank 0 (static: --master-addr, for node rank 0 on that host), else the
// address it reports to the rendezvous (--local-addr or this host's name): that address only, when
// it is one of this host's; else (the name resolves here to 127.0.1.1 only, or to no address of
// this host) every address, with a warning saying why. FTRUN_AGENT_STORE_HOST overrides it.
// Errors name the address and port.
Result<std::unique_ptr<store::StoreServer>> StartAgentStore(boost::asio::io_context& io,
                                                            const LaunchConfig& config,
                                                            const std::string& fqdn,
                                                            AgentStoreSettings settings);

// Where torch 1.13's workers keep their keys on the wire: PrefixStore("/worker/attempt_<n>")
// under the client's own "/" prefix.
inline constexpr std::string_view kWorkerKeysPrefix = "//worker/";

}  // namespace ftrun::launcher
