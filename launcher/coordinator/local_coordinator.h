// LocalCoordinator: a single-node job (--nnodes 1, --standalone). The rendezvous state
// machine runs in-process (the same semantics as a multi-node job, no server, no sockets):
// the round forms at once, a failure spends a restart or ends the job, and each round's
// MASTER_PORT is a port that is free when the round starts.
//
// Thread: loop only. Listener calls are posted. Ownership: owns the state machine and the
// view follower; the listener outlives it. Time: the real steady clock (the state machine
// takes `now` as an argument; only the save deadline arms a timer). Errors: none reach the
// caller; a report the state machine refuses (it cannot happen with the agent's own
// reports) is logged.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <memory>
#include <optional>
#include <string>

#include "launcher/coordinator/coordinator.h"
#include "launcher/coordinator/view_follower.h"
#include "rendezvous/rendezvous_state.h"

namespace ftrun::launcher {

// `job` as this coordinator runs it: one node that cannot get lost, so no liveness and no
// deadlines that matter.
rendezvous::JobSpec OneNodeJob(rendezvous::JobSpec job);

struct LocalCoordinatorOptions {
  rendezvous::JobSpec job;  // min = max = 1
  rendezvous::NodeInfo node;
  std::string role = "default";
  int store_port = 0;  // > 0: every report's free_port (the agent store); else a free port
};

class LocalCoordinator : public Coordinator {
 public:
  LocalCoordinator(boost::asio::io_context& io, LocalCoordinatorOptions options);

  void Start(Listener* listener) override;
  void WorkersStopped() override;
  void Shutdown() override;
  bool HostsRendezvous() const override { return true; }

 private:
  // The agent store's port, else a port free now.
  Result<int> MasterPort() const;
  // Every report goes straight to the in-process state machine.
  void Report(rendezvous::RoundReport report) override;
  // Into the state machine (the same ApplyReport as the server's), then the new view out.
  void Apply(const rendezvous::RoundReport& report);
  void Publish();
  rendezvous::TimePoint Now() const { return rendezvous::Clock::now(); }
  uint64_t Round() const;

  boost::asio::io_context& io_;
  LocalCoordinatorOptions opts_;
  std::optional<rendezvous::RendezvousState> state_;
  std::optional<ViewFollower> follower_;
  boost::asio::steady_timer timer_;  // the state machine's deadlines (the save timeout)
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace ftrun::launcher
