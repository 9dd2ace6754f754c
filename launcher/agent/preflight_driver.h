// PreflightDriver: the pre-flight checks seen from the agent. The switchbox check
// (--switchbox-check) runs once, before this node joins; the network check (--network-check)
// runs whenever the rendezvous orders a wave (phase checking), and its results are logged
// here unless this agent hosts the rendezvous server (which logs them itself).
//
//   Start() -> [switchbox check] -> join()          (the node may join the job)
//           -> exclude(reason)                      (a failed check keeps the node out)
//           -> fail(message)                        (the check itself cannot run)
//
// Thread: loop only. Ownership: owns the check runners; borrows the coordinator and the event log.
#pragma once

#include <boost/asio/io_context.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/environment.h"
#include "launcher/agent/agent_events.h"
#include "launcher/config/launch_config.h"
#include "launcher/coordinator/coordinator.h"
#include "launcher/netcheck/check_runner.h"
#include "launcher/netcheck/switchbox.h"

namespace ftrun::launcher {

class PreflightDriver {
 public:
  struct Outcomes {
    std::function<void()> join;
    std::function<void(const std::string& reason)> exclude;
    std::function<void(const std::string& message)> fail;
  };
  PreflightDriver(boost::asio::io_context& io, const LaunchConfig& config, EnvMap agent_env,
                  Coordinator& coordinator, AgentEvents& events, Outcomes outcomes);
  ~PreflightDriver();

  void Start();
  // The rendezvous' network-check order for this node; results go to the coordinator.
  void OnCheckOrder(uint64_t round, const rendezvous::CheckOrder& order);
  void OnCheckFinished(uint64_t check_id, const std::vector<std::string>& table,
                       const std::string& json);
  // The job is over: drop every running check.
  void Cancel();

 private:
  void OnSwitchboxDone(const SwitchboxReport& report);

  boost::asio::io_context& io_;
  const LaunchConfig& config_;
  EnvMap agent_env_;
  Coordinator& coordinator_;
  AgentEvents& events_;
  Outcomes outcomes_;
  std::unique_ptr<CheckRunner> check_runner_;  // --network-check: this node's probes
  std::unique_ptr<SwitchboxCheck> switchbox_;  // --switchbox-check, before joining
};

}  // namespace ftrun::launcher
