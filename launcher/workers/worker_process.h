// WorkerProcess: owns one child process started for a worker (or any helper command).
//
// The child runs in its own process group, gets PR_SET_PDEATHSIG=SIGKILL (it never outlives
// a SIGKILLed agent), default SIGPIPE, an empty signal mask, and inherits only fds 0-2.
// It is started with fork and exec (the child allocates nothing before exec: the agent is
// multi-threaded); its exit is an event on the io_context (a pidfd): `on_exit` is called
// exactly once, unless the object is destroyed first. The agent's io_context hears of no fork.
//
// Thread: loop only. Ownership: the owner keeps the object until on_exit has run; the
// destructor never blocks and never kills (a child still running then keeps running, and a
// warning is logged: that is a bug in the owner).
#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/environment.h"
#include "common/result.h"
#include "launcher/workers/spawner.h"

namespace ftrun::launcher {

class WorkerProcess : public ChildProcess {
 public:
  using ExitHandler = Spawner::ExitHandler;

  // Starts the child (argv[0]: the program's resolved path) and returns once it has exec'd.
  // Errors (program not found, exec failure) name the program as given, or as resolved.
  static Result<std::unique_ptr<WorkerProcess>> Spawn(boost::asio::io_context& io,
                                                      const ProcessSpec& spec, ExitHandler on_exit);
  ~WorkerProcess() override;
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  pid_t pid() const override { return pid_; }
  bool exited() const override { return exited_; }

  // Sends `sig` to the child's process group (so grandchildren get it too). A group that is
  // already gone is not an error.
  void SignalGroup(int sig) override;
  void Signal(int sig) override;

 private:
  struct Impl;
  WorkerProcess(pid_t pid, std::unique_ptr<Impl> impl);
  void AwaitExit();  // one wait on the pidfd; again after a spurious wakeup

  pid_t pid_;
  bool exited_ = false;
  std::unique_ptr<Impl> impl_;
  ExitHandler on_exit_;
  std::shared_ptr<bool> alive_;  // lets a late completion see that the object is gone
};

// Whether `pid` is a child this process started (WorkerProcess::Spawn) and has not reaped yet:
// its exit status belongs to its WorkerProcess (orphan_reaper.h leaves it alone).
bool IsStartedChild(pid_t pid);

// The state letter of process `pid` (/proc/PID/stat: 'R', 'S', 'D', 'T' stopped, 't' traced,
// 'Z'...), 0 when it is gone or unreadable. Never throws.
char ProcessStateLetter(pid_t pid);

// The resolved path of `program` as execvp would find it with env's PATH ("" if not found).
std::string FindProgram(const std::string& program, const EnvMap& env);

}  // namespace ftrun::launcher
