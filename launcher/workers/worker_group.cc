#include "launcher/workers/worker_group.h"

#include <unistd.h>

#include <boost/asio/post.hpp>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>

#include "common/log.h"
#include "common/signals.h"

namespace ftrun::launcher {
namespace {

// "worker local_rank=N", or the auxiliary process's name.
std::string Label(const WorkerGroup::Worker& w) {
  return w.local_rank >= 0 ? "worker local_rank=" + std::to_string(w.local_rank) : w.name;
}

}  // namespace

WorkerGroup::WorkerGroup(boost::asio::io_context& io, Spawner& spawner, Clock& clock,
                         rendezvous::NodeAssignment assignment, std::vector<ProcessPlan> plans,
                         ExitHandler on_exit, std::function<void()> on_all_exited)
    : io_(io),
      spawner_(spawner),
      assignment_(std::move(assignment)),
      plans_(std::move(plans)),
      on_exit_(std::move(on_exit)),
      on_all_exited_(std::move(on_all_exited)),
      grace_timer_(clock.NewTimer()) {}

WorkerGroup::~WorkerGroup() { *alive_ = false; }

Status WorkerGroup::Start() {
  workers_.resize(plans_.size());  // never reallocated: exit handlers keep indices
  for (size_t i = 0; i < plans_.size(); ++i) {
    if (auto s = StartOne(i, std::move(plans_[i])); !s) {
      const std::string name = workers_[i].name;
      workers_.resize(i);  // only the started ones count
      Stop(SIGKILL, std::chrono::milliseconds(0));
      if (started_ == 0) {
        boost::asio::post(io_, [this] {
          if (!all_exited_reported_) {
            all_exited_reported_ = true;
            on_all_exited_();
          }
        });
      }
      return s.error().Wrap(name);
    }
  }
  plans_.clear();
  return {};
}

Status WorkerGroup::StartOne(size_t index, ProcessPlan plan) {
  Worker& w = workers_[index];
  w.local_rank = plan.local_rank;
  w.rank = plan.rank;
  w.name = plan.name;
  w.program = plan.program;
  w.error_file = plan.error_file;
  auto stdio = WorkerStdio::Open(io_, plan);
  if (!stdio) return stdio.error();
  ProcessSpec spec;
  spec.program = plan.program;
  spec.args = std::move(plan.args);
  spec.env = std::move(plan.env);
  spec.stdout_fd = (*stdio)->stdout_fd();
  spec.stderr_fd = (*stdio)->stderr_fd();
  auto proc = spawner_.Spawn(spec, [this, index](const ExitStatus& s) { OnExit(index, s); });
  if (!proc) return proc.error();
  w.stdio = std::move(*stdio);
  w.stdio->Spawned();
  w.process = std::move(*proc);
  ++started_;
  LauncherLog()->info("{} started rank={} pid={} attempt={} round={}", Label(w), w.rank,
                      w.process->pid(), assignment_.restart_count, assignment_.round);
  return {};
}

void WorkerGroup::OnExit(size_t index, const ExitStatus& status) {
  Worker& w = workers_[index];
  w.status = status;
  if (w.stdio) w.stdio->Drain();
  on_exit_(w);
  if (live_count() == 0 && !all_exited_reported_) {
    all_exited_reported_ = true;
    grace_timer_->Cancel();
    // Leftover grandchildren in the workers' process groups must not outlive the attempt.
    for (auto& other : workers_) {
      if (other.process) other.process->SignalGroup(SIGKILL);
    }
    // So must those that left the groups (setsid, a double fork): the attempt ends after them.
    std::weak_ptr<bool> alive = alive_;
    spawner_.CollectStrays([this, alive] {
      if (auto a = alive.lock(); a && *a) on_all_exited_();
    });
  }
}

size_t WorkerGroup::live_count() const {
  size_t n = 0;
  for (const auto& w : workers_) {
    if (w.process && !w.process->exited()) ++n;
  }
  return n;
}

size_t WorkerGroup::live_rank_count() const {
  size_t n = 0;
  for (const auto& w : workers_) {
    if (w.local_rank >= 0 && w.process && !w.process->exited()) ++n;
  }
  return n;
}

bool WorkerGroup::OwnsProcessGroupOf(pid_t pid) const {
  const pid_t pgid = ::getpgid(pid);
  for (const auto& w : workers_) {
    if (w.process && !w.process->exited() && pgid == w.process->pid()) return true;
  }
  return false;
}

size_t WorkerGroup::rank_count() const {
  size_t n = 0;
  for (const auto& w : workers_) {
    if (w.local_rank >= 0) ++n;
  }
  return n;
}

void WorkerGroup::Stop(int sig, std::chrono::milliseconds grace) {
  const bool first = !stopping_;
  if (!first && sig == stop_signal_) return;  // already on its way
  stopping_ = true;
  stop_signal_ = sig;
  if (sig != SIGKILL) {
    for (auto& w : workers_) {
      if (!w.process) continue;
      if (!w.process->exited()) {
        LauncherLog()->info("sending {} to {} pid={}", SignalName(sig), Label(w), w.process->pid());
      }
      w.process->SignalGroup(sig);  // an exited worker's group may still hold grandchildren
      // A stopped (SIGSTOP, SIGTSTP) process does not act on the signal until it runs again:
      // without this it would cost the whole grace period, then a SIGKILL.
      if (sig != SIGCONT) w.process->SignalGroup(SIGCONT);
    }
  }
  if (sig == SIGKILL || grace.count() == 0) {
    KillRemaining();
    return;
  }
  if (!first || live_count() == 0) return;
  grace_timer_->Start(grace, [this, grace] {
    for (auto& w : workers_) {
      if (w.process && !w.process->exited()) {
        LauncherLog()->warn("{} pid={} still running {} ms after the stop signal; sending SIGKILL",
                            Label(w), w.process->pid(), grace.count());
      }
    }
    KillRemaining();
  });
}

void WorkerGroup::KillRemaining() {
  grace_timer_->Cancel();
  for (auto& w : workers_) {
    if (w.process && !w.process->exited()) w.process->SignalGroup(SIGKILL);
  }
}

}  // namespace ftrun::launcher
