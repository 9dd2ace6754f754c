// StandbyProcess: one standby interpreter (scripts/python/ftrun/standby.py), started through the
// agent's process spawner, so it is the agent's own child like a worker: its own process group,
// PR_SET_PDEATHSIG, reaped by its pidfd. Its stdin is a Unix socket to the agent (the standby
// moves it aside at once), its stdout/stderr /dev/null until the hand-over.
//
// The standby says "ready" once its modules are imported, or "broken <reason> <detail>"; both
// arrive as events on the loop. HandOver() sends the worker's argv, environment, working
// directory and stdin/stdout/stderr (SCM_RIGHTS), and waits for the standby's "ack" for at most
// `ack_timeout` (the only wait on the loop here: a standby acks as soon as it has read the
// message, in well under a millisecond). From then on the child is the worker: its exit goes
// to the worker's handler, not to Events::on_exit.
//
// Thread: loop only. Ownership: the owner keeps the object until on_exit has run, or until a
// successful HandOver (the child then belongs to the caller); destroying it earlier drops the
// child's exit (and logs a warning, as WorkerProcess does).
#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "common/result.h"
#include "launcher/workers/spawner.h"

namespace ftrun::launcher {

class StandbyProcess {
 public:
  struct Events {
    std::function<void()> on_ready;
    std::function<void(const std::string& reason, const std::string& detail)> on_broken;
    std::function<void(const ExitStatus&)> on_exit;  // before a hand-over only
  };
  // What the worker is: argv[0] is the script (or "-m", module), then its arguments.
  struct Handover {
    std::vector<std::string> argv;
    EnvMap env;
    std::string cwd;
    int stdin_fd = 0;  // the caller keeps ownership of all three
    int stdout_fd = 1;
    int stderr_fd = 2;
  };

  // Starts `spec` (the standby command; its stdin is replaced by the socket).
  static Result<std::unique_ptr<StandbyProcess>> Start(boost::asio::io_context& io,
                                                       Spawner& spawner, ProcessSpec spec,
                                                       Events events);
  ~StandbyProcess();
  StandbyProcess(const StandbyProcess&) = delete;
  StandbyProcess& operator=(const StandbyProcess&) = delete;

  pid_t pid() const { return child_ ? child_->pid() : -1; }
  // Whether /proc says it can run now (not stopped, traced, a zombie or gone).
  bool Runnable() const;

  // On success the child is the worker's; on error (the reason) nothing changed hands and the
  // caller kills the standby.
  Result<std::unique_ptr<ChildProcess>> HandOver(const Handover& h, Spawner::ExitHandler on_exit,
                                                 std::chrono::milliseconds ack_timeout);
  // SIGKILL to its process group; its exit still comes to Events::on_exit.
  void Kill();

 private:
  struct Route;
  StandbyProcess(boost::asio::io_context& io, int socket_fd, Events events);
  void Read();
  void OnLine(const std::string& line);

  boost::asio::posix::stream_descriptor socket_;
  Events events_;
  std::shared_ptr<Route> route_;  // where the child's exit goes (shared with its handler)
  std::unique_ptr<ChildProcess> child_;
  std::string in_;
  char buf_[1024];
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

// Frames the hand-over as standby.py reads it (without the descriptors). Exposed for tests.
std::string EncodeHandover(const StandbyProcess::Handover& h);

}  // namespace ftrun::launcher
