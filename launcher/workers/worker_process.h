// WorkerProcess: owns one child process started for a worker (or any helper command).
//
// The child runs in its own process group, gets PR_SET_PDEATHSIG=SIGKILL (it never outlives
// a SIGKILLed agent), default SIGPIPE, an empty signal mask, and inherits only fds 0-2.
// Boost.Process v2 starts it; its exit is an event on the io_context (a pidfd): `on_exit` is
// called exactly once, unless the object is destroyed first.
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
};

class WorkerProcess {
 public:
  using ExitHandler = std::function<void(const ExitStatus&)>;

  // Starts the child. Errors (program not found, exec failure) name the program.
  static Result<std::unique_ptr<WorkerProcess>> Spawn(boost::asio::io_context& io,
                                                      const ProcessSpec& spec,
                                                      ExitHandler on_exit);
  ~WorkerProcess();
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  pid_t pid() const { return pid_; }
  bool exited() const { return exited_; }
  std::chrono::steady_clock::time_point start_time() const { return start_time_; }

  // Sends `sig` to the child's process group (so grandchildren get it too). A group that is
  // already gone is not an error.
  void SignalGroup(int sig);

 private:
  struct Impl;
  WorkerProcess(pid_t pid, std::unique_ptr<Impl> impl);
  void AwaitExit();  // one wait on the pidfd; again after a spurious wakeup

  pid_t pid_;
  bool exited_ = false;
  std::chrono::steady_clock::time_point start_time_;
  std::unique_ptr<Impl> impl_;
  ExitHandler on_exit_;
  std::shared_ptr<bool> alive_;  // lets a late completion see that the object is gone
};

// The resolved path of `program` as execvp would find it with env's PATH ("" if not found).
std::string FindProgram(const std::string& program, const EnvMap& env);

}  // namespace ftrun::launcher
