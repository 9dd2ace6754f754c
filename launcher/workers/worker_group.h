// WorkerGroup: the processes of this node for one attempt (one rendezvous round), as a
// WorkerPlanner planned them: the workers and any auxiliary process (msrun's scheduler).
// Starts them, reports each exit, and stops them: a signal to every process group, then
// SIGKILL to the groups still alive after the grace period. Once every process exited, the
// spawner collects their strays (Spawner::CollectStrays), then on_all_exited runs.
//
// Processes come from the injected Spawner and the grace period from the injected Clock, so
// tests drive a group without real processes or real time.
//
// Thread: loop only. Ownership: owns the children and their WorkerStdio; the owner keeps the
// group until on_all_exited has run (then every child is reaped). The spawner and clock
// outlive the group.
#pragma once

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "launcher/workers/spawner.h"
#include "launcher/workers/worker_plan.h"
#include "launcher/workers/worker_stdio.h"
#include "rendezvous/assignment.h"

namespace ftrun::launcher {

class WorkerGroup {
 public:
  struct Worker {
    int local_rank = -1;  // -1: auxiliary (not a rank)
    int rank = -1;
    std::string name;
    std::string program;
    std::string error_file;
    std::unique_ptr<ChildProcess> process;
    std::unique_ptr<WorkerStdio> stdio;  // its stdout/stderr (files, tees)
    std::optional<ExitStatus> status;    // set once it exited
  };
  using ExitHandler = std::function<void(const Worker&)>;

  WorkerGroup(boost::asio::io_context& io, Spawner& spawner, Clock& clock,
              rendezvous::NodeAssignment assignment, std::vector<ProcessPlan> plans,
              ExitHandler on_exit, std::function<void()> on_all_exited);
  ~WorkerGroup();
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  // Starts every process. On error the ones already started are stopped (on_all_exited
  // still follows) and the error names the process and the program.
  Status Start();

  // Sends `sig` (then SIGCONT, so that a stopped process acts on it at once) to every
  // process group; after `grace`, SIGKILL to the ones still alive. A
  // zero grace sends `sig` and SIGKILL at once; SIGKILL kills at once. Repeating the same
  // signal does nothing.
  void Stop(int sig, std::chrono::milliseconds grace);

  size_t live_count() const;
  // How many of the ranks (auxiliaries not counted) are still running.
  size_t live_rank_count() const;
  // How many of the processes are ranks (the first ones in workers()).
  size_t rank_count() const;
  // Whether `pid` belongs to the process group of one of the running processes (torch's
  // watchdog timers may come from a worker's children).
  bool OwnsProcessGroupOf(pid_t pid) const;
  // The workers in local-rank order, then the auxiliary processes.
  const std::vector<Worker>& workers() const { return workers_; }
  const rendezvous::NodeAssignment& assignment() const { return assignment_; }

 private:
  Status StartOne(size_t index, ProcessPlan plan);
  void OnExit(size_t index, const ExitStatus& status);
  void KillRemaining();

  boost::asio::io_context& io_;
  Spawner& spawner_;
  rendezvous::NodeAssignment assignment_;
  std::vector<ProcessPlan> plans_;
  ExitHandler on_exit_;
  std::function<void()> on_all_exited_;
  std::vector<Worker> workers_;
  std::unique_ptr<Timer> grace_timer_;
  bool stopping_ = false;
  int stop_signal_ = 0;
  bool all_exited_reported_ = false;
  size_t started_ = 0;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // for the strays' collection
};

// The group running now, or null between rounds: how collaborators that outlive one group
// find the current one.
using CurrentGroup = std::function<const WorkerGroup*()>;

}  // namespace ftrun::launcher
