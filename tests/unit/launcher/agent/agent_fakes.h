// Fakes for the agent's unit tests: a spawner whose children are objects the test ends, a
// coordinator that records what the agent tells it, and a planner of N plain workers. With
// FakeClock (tests/support/fake_clock.h) every agent transition runs in microseconds.
#pragma once

#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <csignal>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "launcher/coordinator/coordinator.h"
#include "launcher/workers/spawner.h"
#include "launcher/workers/worker_plan.h"

namespace ftrun::testing {

using launcher::ExitStatus;

class FakeSpawner;

// A child that runs until the test (or a signal it does not ignore) ends it. Its exit is
// posted to the loop, as a real child's exit arrives.
class FakeChild : public launcher::ChildProcess {
 public:
  FakeChild(FakeSpawner& owner, boost::asio::io_context& io, pid_t pid, launcher::ProcessSpec spec,
            launcher::Spawner::ExitHandler on_exit);
  ~FakeChild() override;

  pid_t pid() const override { return pid_; }
  bool exited() const override { return exited_; }
  void SignalGroup(int sig) override {
    group_signals.push_back(sig);
    Deliver(sig);
  }
  void Signal(int sig) override { signals.push_back(sig); }

  // Ends the process now with an exit code or a signal.
  void Exit(int code) { Finish({code, 0}); }
  void Kill(int sig) { Finish({0, sig}); }

  launcher::ProcessSpec spec;
  std::vector<int> group_signals;  // what the group was sent, in order
  std::vector<int> signals;        // what the process alone was sent (e.g. stack dumps)
  bool ignores_sigterm = false;    // a worker that needs SIGKILL

 private:
  void Deliver(int sig) {
    if (exited_ || dying_ || (sig == SIGTERM && ignores_sigterm) || sig == 0 || sig == SIGCONT) {
      return;  // SIGCONT resumes a stopped process; it does not end one
    }
    dying_ = true;
    boost::asio::post(io_, [this, alive = alive_, sig] {
      if (*alive) Finish({0, sig});
    });
  }
  void Finish(ExitStatus st) {
    if (exited_) return;
    exited_ = true;
    auto h = std::move(on_exit_);
    h(st);  // may destroy this object
  }

  FakeSpawner& owner_;
  boost::asio::io_context& io_;
  pid_t pid_;
  bool exited_ = false;
  bool dying_ = false;
  launcher::Spawner::ExitHandler on_exit_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

class FakeSpawner : public launcher::Spawner {
 public:
  explicit FakeSpawner(boost::asio::io_context& io) : io_(io) {}

  Result<std::unique_ptr<launcher::ChildProcess>> Spawn(const launcher::ProcessSpec& spec,
                                                        ExitHandler on_exit) override {
    if (missing.count(spec.program)) {
      return Error{"cannot start '" + spec.program + "': not found in PATH"};
    }
    ++spawned;
    // Pids far above pid_max, so nothing real is ever signalled; or our own process group
    // for a rank that must pass the control channel's peer check (its leader is not this
    // test's child, so the agent's stack collector never runs eu-stack, a ptrace, on it).
    const pid_t pid = own_pgid_next ? ::getpgrp() : next_pid_++;
    own_pgid_next = false;
    return std::unique_ptr<launcher::ChildProcess>(
        std::make_unique<FakeChild>(*this, io_, pid, spec, std::move(on_exit)));
  }

  void Prepare(const std::vector<launcher::ProcessSpec>& specs) override {
    prepared.push_back(specs);
  }

  // The live children, in spawn order.
  std::vector<FakeChild*> children;
  std::vector<std::vector<launcher::ProcessSpec>> prepared;  // each Prepare() call
  std::set<std::string> missing;                             // programs that "are not found"
  int spawned = 0;
  bool own_pgid_next = false;  // the next child's pid is this test's process group

 private:
  boost::asio::io_context& io_;
  pid_t next_pid_ = 1 << 24;
};

inline FakeChild::FakeChild(FakeSpawner& owner, boost::asio::io_context& io, pid_t pid,
                            launcher::ProcessSpec s, launcher::Spawner::ExitHandler on_exit)
    : spec(std::move(s)), owner_(owner), io_(io), pid_(pid), on_exit_(std::move(on_exit)) {
  owner_.children.push_back(this);
}

inline FakeChild::~FakeChild() {
  *alive_ = false;
  std::erase(owner_.children, this);
}

// Records every call the agent makes; the test plays the rendezvous by calling the agent's
// Listener methods.
class FakeCoordinator : public launcher::Coordinator {
 public:
  struct Log {
    int started = 0, succeeded = 0, stopped = 0, shutdowns = 0;
    std::vector<launcher::WorkerFailure> failures;
    std::vector<std::vector<rendezvous::RankProgress>> progress;
    struct Saved {
      uint64_t id;
      int rank;
      bool finalize, ok;
      std::string error;
    };
    std::vector<Saved> saved;
  };
  explicit FakeCoordinator(std::shared_ptr<Log> log) : log_(std::move(log)) {}
  void Start(Listener*) override { ++log_->started; }
  void WorkersStopped() override { ++log_->stopped; }
  void Shutdown() override { ++log_->shutdowns; }
  bool HostsRendezvous() const override { return true; }

 private:
  void Report(rendezvous::RoundReport r) override {
    const rendezvous::ReportDetails& d = r.details;
    switch (r.kind) {
      case rendezvous::ReportKind::kFailed:
        log_->failures.insert(log_->failures.end(), r.failures.begin(), r.failures.end());
        break;
      case rendezvous::ReportKind::kSucceeded:
        ++log_->succeeded;
        break;
      case rendezvous::ReportKind::kProgress:
        log_->progress.push_back(d.progress);
        break;
      case rendezvous::ReportKind::kSaved:
        log_->saved.push_back({d.save_id, d.rank, d.finalize, d.ok, d.error});
        break;
      default:
        ADD_FAILURE() << "the agent reported kind " << static_cast<int>(r.kind);
    }
  }

  std::shared_ptr<Log> log_;
};

// N workers running "worker", output inherited.
class FakePlanner : public launcher::WorkerPlanner {
 public:
  explicit FakePlanner(int nproc, std::string program = "worker")
      : nproc_(nproc), program_(std::move(program)) {}
  Result<std::string> PrepareLogs(const rendezvous::NodeAssignment&) override {
    return Result<std::string>(boost::system::in_place_value, "");
  }
  std::vector<launcher::ProcessPlan> Plan(const rendezvous::NodeAssignment& a,
                                          const EnvMap& extra_env) override {
    std::vector<launcher::ProcessPlan> plans(nproc_);
    for (int i = 0; i < nproc_; ++i) {
      plans[i].program = program_;
      plans[i].local_rank = i;
      plans[i].rank = a.base_rank + i;
      plans[i].env = extra_env;
    }
    return plans;
  }
  std::string EntrypointName() const override { return program_; }
  void ReportFailure(const std::vector<launcher::WorkerFailure>&, std::ostream&) override {
    ++failure_reports;
  }
  int failure_reports = 0;

 private:
  int nproc_;
  std::string program_;
};

}  // namespace ftrun::testing
