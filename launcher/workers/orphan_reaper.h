// OrphanReaper: no process of an attempt outlives it. The agent is a child subreaper
// (PR_SET_CHILD_SUBREAPER): a worker's descendant that left the worker's process group (setsid,
// setpgid, a double fork) and so escaped the group kill is not handed to init when its parent
// dies, but adopted by the agent. At the end of each attempt KillAdopted SIGKILLs every process
// the agent adopted, with all its descendants, and reaps the adopted ones.
//
// Adopted means: a child of this process that it did not start itself. Children it starts
// (WorkerProcess registers each until it reaps it: IsStartedChild) are never signalled or
// reaped here, so their exit statuses stay theirs; so are the children of live processes.
//
// When the agent itself is SIGKILLed nobody can do this: its workers die (PR_SET_PDEATHSIG),
// but what they left outside their process groups goes to the next subreaper up, or init.
//
// Thread: loop only. Ownership: the reaper outlives the waits it started (it is the spawner's).
#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "common/result.h"

namespace ftrun::launcher {

// How long KillAdopted waits for what it killed before it gives up (with a warning): a
// process in uninterruptible sleep dies only when its I/O ends.
inline constexpr std::chrono::milliseconds kReapLimit{5000};

class OrphanReaper {
 public:
  explicit OrphanReaper(boost::asio::io_context& io) : io_(io) {}
  ~OrphanReaper();
  OrphanReaper(const OrphanReaper&) = delete;
  OrphanReaper& operator=(const OrphanReaper&) = delete;

  // Makes this process a child subreaper; an error says why not.
  static Status BecomeSubreaper();

  // SIGKILLs every adopted process and its descendants, reaps the adopted ones (again for
  // those adopted meanwhile, as their parents die), then calls done(killed) on the loop —
  // never inside this call. Not a subreaper or nothing adopted: done(0) at once (posted).
  void KillAdopted(std::function<void(size_t killed)> done);

 private:
  struct Sweep;
  void Continue(std::shared_ptr<Sweep> sweep);

  boost::asio::io_context& io_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace ftrun::launcher
