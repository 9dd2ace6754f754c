// CheckRunner: this agent's part of one wave of the network check (rendezvous::CheckOrder).
// As the client of a pair it measures the listener's probe (pair_probe.h); with a check
// command (--network-check-cmd, --comm-perf-test) each side of a pair also runs the command as
// one rank of a 2-process job (RANK 0 on the listener, 1 on the client, WORLD_SIZE 2,
// MASTER_ADDR/PORT the listener's), judged by its exit code within the order's timeout.
//
// Thread: loop only. Ownership: the agent owns it; a new order or Cancel() drops what the
// previous order still runs (probes are cancelled, commands SIGKILLed and reaped).
#pragma once

#include <boost/asio/io_context.hpp>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "common/environment.h"
#include "launcher/netcheck/pair_probe.h"
#include "launcher/workers/worker_process.h"
#include "rendezvous/job_state.h"

namespace ftrun::launcher {

class CheckRunner {
 public:
  using Done =
      std::function<void(uint64_t order_id, std::vector<rendezvous::CheckTaskResult> results)>;

  // `command`: the check command's argv (empty: none); `env`: its base environment.
  CheckRunner(boost::asio::io_context& io, std::vector<std::string> command, EnvMap env);
  ~CheckRunner();

  // Runs the order's tasks concurrently; `done` runs once on the loop with every result,
  // unless the order has nothing to report (a listener without a command) or is cancelled.
  void Run(const rendezvous::CheckOrder& order, Done done);
  void Cancel();

 private:
  struct Task;
  void StartProbe(const std::shared_ptr<Task>& t, const rendezvous::CheckTask& task,
                  const rendezvous::CheckOrder& order);
  void StartCommand(const std::shared_ptr<Task>& t, const rendezvous::CheckTask& task);
  void Finished();

  boost::asio::io_context& io_;
  std::vector<std::string> command_;
  EnvMap env_;
  uint64_t order_id_ = 0;
  rendezvous::Duration timeout_{60};
  std::vector<std::shared_ptr<Task>> tasks_;
  std::list<std::unique_ptr<WorkerProcess>> reaping_;  // killed commands, until they exit
  Done done_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace ftrun::launcher
