// Spawner: how the worker group starts a process and learns of its exit. The real one
// (ProcessSpawner) starts WorkerProcess children; tests inject a fake that starts nothing, so
// the agent's every transition can be driven in milliseconds.
//
// Contract: Spawn() returns a started child or an error naming the program; the child calls
// `on_exit` exactly once, on the loop, never inside Spawn() and never after it is destroyed.
//
// Thread: loop only.
#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/environment.h"
#include "common/result.h"

namespace ftrun::launcher {

// How a process ended: by exit (code) or by a signal (signal != 0).
struct ExitStatus {
  int code = 0;
  int signal = 0;

  bool Succeeded() const { return signal == 0 && code == 0; }
  // torchrun's exitcode: the code, or minus the signal number.
  int TorchExitCode() const { return signal != 0 ? -signal : code; }
  // The shell's view: the code, or 128 + signal.
  int ShellExitCode() const { return signal != 0 ? 128 + signal : code; }
  // "exit code 3" or "signal 9 (SIGKILL)".
  std::string Describe() const;
};

struct ProcessSpec {
  std::string program;            // a path, or a name looked up in env's PATH
  std::vector<std::string> args;  // argv[1..]
  EnvMap env;
  // Descriptors to become the child's stdout/stderr; -1 keeps ftrun's own. The caller keeps
  // ownership (close them after Spawn returns).
  int stdout_fd = -1;
  int stderr_fd = -1;
  int stdin_fd = -1;  // likewise for stdin (a standby's socket to the agent)
};

// A started child, as the worker group and the agent see it.
class ChildProcess {
 public:
  virtual ~ChildProcess() = default;
  virtual pid_t pid() const = 0;
  virtual bool exited() const = 0;
  // Sends `sig` to the child's process group (grandchildren too); a gone group is no error.
  virtual void SignalGroup(int sig) = 0;
  // Sends `sig` to the child alone (e.g. the stack-dump signal).
  virtual void Signal(int sig) = 0;
};

class Spawner {
 public:
  using ExitHandler = std::function<void(const ExitStatus&)>;
  virtual ~Spawner() = default;
  virtual Result<std::unique_ptr<ChildProcess>> Spawn(const ProcessSpec& spec,
                                                      ExitHandler on_exit) = 0;
  // The end of an attempt, every child it started reaped: kills and reaps what they left
  // behind outside their process groups (orphan_reaper.h), then calls `done` (on the loop; the
  // default has nothing to collect and calls it at once).
  virtual void CollectStrays(std::function<void()> done) { done(); }
  // The job is over for this agent: stop what was kept for later attempts (the standbys of
  // --warm-restart). Children already returned by Spawn are the caller's.
  virtual void Shutdown() {}
  // This agent waits outside the running round (a spare): processes like `specs` may be asked
  // for at any moment. A spawner that keeps processes ready for later starts (--warm-restart)
  // prepares them now; the default keeps nothing.
  virtual void Prepare(const std::vector<ProcessSpec>& /*specs*/) {}
};

// Real processes (WorkerProcess) whose exits are events on `io`. The agent that makes one
// becomes a child subreaper (orphan_reaper.h) and collects strays at the end of each attempt.
std::unique_ptr<Spawner> MakeProcessSpawner(boost::asio::io_context& io);

}  // namespace ftrun::launcher
