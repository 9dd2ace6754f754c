// WorkerGroup: the nproc_per_node workers of this node for one attempt (one rendezvous
// round). Starts them with torchrun's environment, command line and stdio wiring, reports
// each exit, and stops them: a signal to every worker's process group, then SIGKILL to the
// groups still alive after the grace period.
//
// Thread: loop only. Ownership: owns the WorkerProcess and OutputTee objects; the owner
// keeps the group until on_all_exited has run (then every child is reaped).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launcher/environment.h"
#include "launcher/launch_config.h"
#include "launcher/output_tee.h"
#include "launcher/worker_process.h"
#include "rendezvous/assignment.h"

namespace ftrun::launcher {

// Program and arguments of one worker, after ${local_rank} substitution.
struct WorkerCommand {
  std::string program;
  std::vector<std::string> args;
};
WorkerCommand BuildWorkerCommand(const LaunchConfig& config, int local_rank);

// The name torchrun shows in "<name> FAILED": the script, the module, or the binary.
std::string EntrypointName(const LaunchConfig& config);

struct WorkerGroupOptions {
  const LaunchConfig* config = nullptr;
  const EnvMap* agent_env = nullptr;
  rendezvous::NodeAssignment assignment;
  std::string attempt_dir;  // "" when logs are disabled
  EnvMap extra_env;         // FTRUN_* variables, on top of torchrun's
};

class WorkerGroup {
 public:
  struct Worker {
    int local_rank = 0;
    int rank = 0;
    std::string error_file;
    std::unique_ptr<WorkerProcess> process;
    std::vector<std::unique_ptr<OutputTee>> tees;
    std::optional<ExitStatus> status;  // set once it exited
  };
  using ExitHandler = std::function<void(const Worker&)>;

  WorkerGroup(boost::asio::io_context& io, WorkerGroupOptions options, ExitHandler on_exit,
              std::function<void()> on_all_exited);
  ~WorkerGroup();
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  // Starts every worker. On error the workers already started are stopped (on_all_exited
  // still follows) and the error names the rank and the program.
  Status Start();

  // Sends `sig` to every worker's process group; after `grace`, SIGKILL to the ones still
  // alive. A zero grace sends `sig` and SIGKILL at once; SIGKILL kills at once. Repeating
  // the same signal does nothing.
  void Stop(int sig, std::chrono::milliseconds grace);

  size_t live_count() const;
  bool stopping() const { return stopping_; }
  const std::vector<Worker>& workers() const { return workers_; }
  const rendezvous::NodeAssignment& assignment() const { return opts_.assignment; }

 private:
  Status StartWorker(Worker& w);
  Result<int> StreamFd(Worker& w, int mask_bit, int redirect, int tee);
  void OnExit(size_t index, const ExitStatus& status);
  void KillRemaining();

  boost::asio::io_context& io_;
  WorkerGroupOptions opts_;
  ExitHandler on_exit_;
  std::function<void()> on_all_exited_;
  std::vector<int> redirects_;
  std::vector<int> tees_;
  std::shared_ptr<SharedFile> filtered_stdout_;
  std::shared_ptr<SharedFile> filtered_stderr_;
  std::vector<Worker> workers_;
  boost::asio::steady_timer grace_timer_;
  bool stopping_ = false;
  int stop_signal_ = 0;
  bool all_exited_reported_ = false;
  size_t started_ = 0;
};

}  // namespace ftrun::launcher
