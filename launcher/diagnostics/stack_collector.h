// StackCollector: gathers this node's ranks' stacks without blocking the agent's loop.
// For every target it truncates the rank's dump file (python_stack_hook.h), sends the
// stack-dump signal — only to a process that catches it (StackTarget::has_handler, or
// /proc/PID/status SigCgt), since its default action would kill the process — and runs `eu-stack -p
// PID` when installed and the target is a child this process started (IsStartedChild: eu-stack's
// ptrace stops its target: never anyone else's process; an eu-stack killed at the deadline is
// followed by a SIGCONT, so that the stop its attach left behind does not outlive it). A timer
// polls the files: a dump is complete once it is non-empty, ends a line and did not grow since the
// last poll. Everything left at the deadline is reported as it is, with a note
// ("did not write its stack within 3s"). Texts are cut at max_bytes.
//
// Thread: loop only. Ownership: borrows io and clock (they outlive it). One collection at a
// time: a Collect() while one runs is answered with that one's result. Errors: none are
// returned; what could not be collected is said in RankDump::note.
#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/environment.h"
#include "launcher/diagnostics/stacks_merge.h"
#include "launcher/workers/spawner.h"

namespace ftrun::launcher {

struct StackTarget {
  int rank = -1;
  pid_t pid = 0;
  ChildProcess* process = nullptr;  // signalled through it when set (else kill(2) on pid)
  bool has_handler = false;         // known to catch the signal (its helper said hello); else
                                    // /proc/PID/status decides
};

struct StackCollectorOptions {
  std::string dump_dir;  // where the ranks' stack-<pid>.txt are
  int signal = 0;        // the stack-dump signal
  std::chrono::milliseconds deadline{3000};
  std::chrono::milliseconds poll{50};
  size_t max_bytes = 64 * 1024;  // per rank, Python and native each
  std::string eu_stack;          // its path ("" : not installed)
  std::string host;              // RankDump::host
};

class StackCollector {
 public:
  using Done = std::function<void(std::vector<RankDump>)>;
  StackCollector(boost::asio::io_context& io, Clock& clock, StackCollectorOptions options);
  ~StackCollector();

  void Collect(std::vector<StackTarget> targets, Done done);
  bool busy() const { return run_ != nullptr; }
  const StackCollectorOptions& options() const { return opts_; }

  // Whether process `pid` catches signal `sig` (its handler is installed).
  static bool CatchesSignal(pid_t pid, int sig);
  // eu-stack's path on `env`'s PATH, "" when not installed.
  static std::string FindEuStack(const EnvMap& env);
  // Why native stacks are missing, for the report ("" when eu-stack is there).
  std::string NativeNote() const;

 private:
  struct Run;
  void Poll();
  void Finish();

  boost::asio::io_context& io_;
  Clock& clock_;
  StackCollectorOptions opts_;
  std::unique_ptr<Timer> timer_;
  std::unique_ptr<Run> run_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // for eu-stack's late exits
};

}  // namespace ftrun::launcher
