// WorkerStdio: where one process's stdout and stderr go, as its ProcessPlan says — inherited
// from the agent, a log file, or a tee (OutputTee: a log file and the console with a prefix).
// Opens the descriptors before the spawn, hands their numbers to the spawner, then closes the
// agent's copies and starts copying the tee pipes; after the exit it drains them.
//
// Thread: loop only. Ownership: owns the plain files until Spawned() and the OutputTees for
// its whole life. Errors: Open names the log file it could not open.
#pragma once

#include <boost/asio/io_context.hpp>
#include <memory>
#include <vector>

#include "common/result.h"
#include "launcher/workers/output_tee.h"
#include "launcher/workers/worker_plan.h"

namespace ftrun::launcher {

class WorkerStdio {
 public:
  static Result<std::unique_ptr<WorkerStdio>> Open(boost::asio::io_context& io,
                                                   const ProcessPlan& plan);
  ~WorkerStdio();
  WorkerStdio(const WorkerStdio&) = delete;
  WorkerStdio& operator=(const WorkerStdio&) = delete;

  // The child's descriptors (-1: inherit the agent's).
  int stdout_fd() const { return out_; }
  int stderr_fd() const { return err_; }
  // The child has its copies: close the agent's copies of the write ends and start copying
  // the tee pipes. (When the spawn failed, destroy the object instead.)
  void Spawned();
  // The process exited: copy what is left in the pipes.
  void Drain();

 private:
  WorkerStdio() = default;
  Result<int> OpenStream(boost::asio::io_context& io, const StreamPlan& s);
  void CloseFiles();

  std::vector<std::unique_ptr<OutputTee>> tees_;
  int out_ = -1;
  int err_ = -1;
  std::vector<int> files_;  // plain log files: the agent's copies, closed by Spawned()
};

}  // namespace ftrun::launcher
