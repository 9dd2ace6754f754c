// WarmSpawner: the Spawner of --warm-restart. It wraps the agent's process spawner: a worker
// whose program is the job's Python interpreter running a script or a module starts on a
// ready standby interpreter (standby_process.h) made for the same command and environment,
// which then runs the script exactly as a cold `python [flags] script.py args` would (ftrun(1),
// "Warm restart"); anything else, and any worker without a usable standby, starts cold through
// the wrapped spawner, with one log line saying why. After each start of workers the pool
// (standby_pool.h) is refilled in the background: one standby per worker, for the next attempt.
// A spare agent has started no workers yet: Prepare() fills the pool from the workers it would
// start, so that its first attempt after promotion is warm too.
//
// Thread: loop only. Ownership: owns the wrapped spawner and the standbys; Shutdown() (the job
// is over) kills the standbys so that the loop can run out of work. Errors: a standby's
// trouble never fails a Spawn; only the cold start can.
#pragma once

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "launcher/config/launch_config.h"
#include "launcher/standby/python_command.h"
#include "launcher/standby/standby_pool.h"
#include "launcher/standby/standby_process.h"
#include "launcher/workers/spawner.h"

namespace ftrun::launcher {

struct WarmSpawnerOptions {
  std::string python;                // the job's interpreter (LaunchConfig::python)
  std::vector<std::string> preload;  // modules the standbys import in advance
  std::string bootstrap;             // path of ftrun/standby.py
  int nice = 10;                     // added to the preloading thread's nice value
  std::chrono::milliseconds ack_timeout{1000};
  StandbyPoolOptions pool;
};

class WarmSpawner : public Spawner {
 public:
  WarmSpawner(boost::asio::io_context& io, std::unique_ptr<Spawner> inner,
              WarmSpawnerOptions options, std::unique_ptr<Clock> clock = nullptr);
  ~WarmSpawner() override;
  WarmSpawner(const WarmSpawner&) = delete;
  WarmSpawner& operator=(const WarmSpawner&) = delete;

  Result<std::unique_ptr<ChildProcess>> Spawn(const ProcessSpec& spec,
                                              ExitHandler on_exit) override;
  void CollectStrays(std::function<void()> done) override;
  void Shutdown() override;
  // Before the first start of workers only (afterwards the pool wants that start's keys).
  void Prepare(const std::vector<ProcessSpec>& specs) override;

  const StandbyPool& pool() const { return pool_; }

 private:
  struct Template {
    ProcessSpec spec;
    PythonCommand command;
  };
  // A ready standby for `spec`, handed over; null (and `why`) when there is none to use.
  std::unique_ptr<ChildProcess> TryWarm(const ProcessSpec& spec, const PythonCommand& cmd,
                                        const std::string& key, ExitHandler& on_exit,
                                        std::string& why);
  void EndOfStart();  // posted after the first Spawn of a start of workers
  void Act();         // runs the pool's actions, re-arms the timer
  void StartStandby(uint64_t id, const std::string& key);

  boost::asio::io_context& io_;
  std::unique_ptr<Spawner> inner_;
  WarmSpawnerOptions opts_;
  std::unique_ptr<Clock> clock_;
  std::unique_ptr<Timer> timer_;
  StandbyPool pool_;
  int devnull_ = -1;

  // State below is touched only on the loop.
  std::map<uint64_t, std::unique_ptr<StandbyProcess>> standbys_;
  std::map<std::string, Template> templates_;  // by key, from the latest start of workers
  std::map<std::string, int> starting_keys_;   // the start of workers in progress
  bool end_posted_ = false;
  bool started_before_ = false;  // a start of workers has ended: standbys may exist
  bool prepared_ = false;        // Prepare() asked for standbys: the first start may be warm
  bool said_not_applicable_ = false;
  bool said_off_ = false;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

// The spawner the agent uses: real processes, warm ones with --warm-restart.
std::unique_ptr<Spawner> MakeSpawner(boost::asio::io_context& io, const LaunchConfig& config);

}  // namespace ftrun::launcher
