#include "launcher/standby/warm_spawner.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <filesystem>

#include "common/log.h"

namespace ftrun::launcher {
namespace {

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : ",") + i;
  return out;
}

std::string CurrentDir() {
  std::error_code ec;
  auto p = std::filesystem::current_path(ec);
  return ec ? std::string(".") : p.string();
}

long Ms(std::chrono::steady_clock::duration d) {
  return static_cast<long>(std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
}

}  // namespace

WarmSpawner::WarmSpawner(boost::asio::io_context& io, std::unique_ptr<Spawner> inner,
                         WarmSpawnerOptions options, std::unique_ptr<Clock> clock)
    : io_(io),
      inner_(std::move(inner)),
      opts_(std::move(options)),
      clock_(clock ? std::move(clock) : MakeSteadyClock(io)),
      timer_(clock_->NewTimer()),
      pool_(opts_.pool),
      devnull_(::open("/dev/null", O_RDWR | O_CLOEXEC)) {}

WarmSpawner::~WarmSpawner() {
  *alive_ = false;
  timer_->Cancel();
  if (devnull_ >= 0) ::close(devnull_);
}

Result<std::unique_ptr<ChildProcess>> WarmSpawner::Spawn(const ProcessSpec& spec,
                                                         ExitHandler on_exit) {
  auto cmd = ParsePythonCommand(spec, opts_.python);
  if (!cmd) {
    if (!said_not_applicable_) {
      LauncherLog()->info("warm restart: this worker starts cold: {}", cmd.error().message);
      said_not_applicable_ = true;
    }
    return inner_->Spawn(spec, std::move(on_exit));
  }
  const std::string key = StandbyKey(spec, *cmd);
  templates_[key] = Template{spec, *cmd};
  ++starting_keys_[key];
  if (!end_posted_) {
    end_posted_ = true;
    std::weak_ptr<bool> alive = alive_;
    boost::asio::post(io_, [this, alive] {
      if (auto a = alive.lock(); a && *a) EndOfStart();
    });
  }
  std::string why;
  if (auto child = TryWarm(spec, *cmd, key, on_exit, why)) return child;
  const std::string local_rank = Lookup(spec.env, "LOCAL_RANK").value_or("?");
  if ((!started_before_ && !prepared_) ||
      (why == "no_standby" && !pool_.off())) {  // nothing to take yet
    LauncherLog()->debug("warm restart: local_rank={} starts cold reason={}", local_rank, why);
  } else {
    LauncherLog()->warn("warm restart: local_rank={} starts cold reason={}", local_rank, why);
  }
  return inner_->Spawn(spec, std::move(on_exit));
}

std::unique_ptr<ChildProcess> WarmSpawner::TryWarm(const ProcessSpec& spec,
                                                   const PythonCommand& cmd, const std::string& key,
                                                   ExitHandler& on_exit, std::string& why) {
  if (!cmd.module) {
    struct stat st {};
    if (::stat(cmd.target.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      why = "script_not_a_file path=" + cmd.target;  // Python itself reports it, cold
      return nullptr;
    }
  }
  const StandbyPool::Pick pick = pool_.Take(key);
  auto it = standbys_.find(pick.id);
  if (pick.id == 0 || it == standbys_.end()) {
    why = pick.id == 0 ? pick.reason : "standby_missing";
    return nullptr;
  }
  StandbyProcess::Handover h;
  if (cmd.module) h.argv = {"-m", cmd.target};
  if (!cmd.module) h.argv = {cmd.target};
  h.argv.insert(h.argv.end(), cmd.args.begin(), cmd.args.end());
  h.env = spec.env;
  h.cwd = CurrentDir();
  h.stdin_fd = ::fcntl(0, F_GETFD) >= 0 ? 0 : devnull_;
  h.stdout_fd = spec.stdout_fd >= 0 ? spec.stdout_fd : 1;
  h.stderr_fd = spec.stderr_fd >= 0 ? spec.stderr_fd : 2;
  const auto start = clock_->Now();
  const pid_t pid = it->second->pid();
  auto child = it->second->HandOver(h, on_exit, opts_.ack_timeout);
  if (!child) {
    why = child.error().message + " pid=" + std::to_string(pid);
    pool_.HandOverFailed(pick.id, child.error().message, clock_->Now());
    it->second->Kill();
    return nullptr;
  }
  pool_.HandedOver(pick.id);
  standbys_.erase(it);
  LauncherLog()->info("warm restart: local_rank={} starts on standby pid={} handover_ms={}",
                      Lookup(spec.env, "LOCAL_RANK").value_or("?"), pid, Ms(clock_->Now() - start));
  return std::move(*child);
}

void WarmSpawner::EndOfStart() {
  end_posted_ = false;
  started_before_ = true;
  pool_.Want(starting_keys_, clock_->Now());
  for (auto it = templates_.begin(); it != templates_.end();) {
    it = starting_keys_.count(it->first) ? std::next(it) : templates_.erase(it);
  }
  starting_keys_.clear();
  Act();
}

void WarmSpawner::Act() {
  for (const auto& a : pool_.Poll(clock_->Now())) {
    if (a.kind == StandbyPool::Action::Kind::kSpawn) {
      StartStandby(a.id, a.key);
    } else if (auto it = standbys_.find(a.id); it != standbys_.end()) {
      LauncherLog()->info("warm restart: killing standby pid={} reason={}", it->second->pid(),
                          a.why);
      it->second->Kill();
    }
  }
  if (pool_.off() && !said_off_ && pool_.off_reason() != "cause=job_over") {
    said_off_ = true;
    LauncherLog()->warn("warm restart: off for the rest of the job {}; workers start cold",
                        pool_.off_reason());
  }
  const auto next = pool_.NextDeadline();
  if (!next) {
    timer_->Cancel();
    return;
  }
  const auto now = clock_->Now();
  std::weak_ptr<bool> alive = alive_;
  timer_->Start(*next > now ? *next - now : Clock::TimePoint::duration::zero(), [this, alive] {
    if (auto a = alive.lock(); a && *a) Act();
  });
}

void WarmSpawner::StartStandby(uint64_t id, const std::string& key) {
  auto t = templates_.find(key);
  if (t == templates_.end()) {
    pool_.SpawnFailed(id, "no_template", clock_->Now());
    return;
  }
  const PythonCommand& cmd = t->second.command;
  ProcessSpec s;
  s.program = t->second.spec.program;
  s.args = cmd.flags;
  s.args.insert(s.args.end(), {opts_.bootstrap, "--preload", Join(opts_.preload), "--nice",
                               std::to_string(opts_.nice), cmd.module ? "--module" : "--script",
                               cmd.target, "--"});
  s.args.insert(s.args.end(), cmd.args.begin(), cmd.args.end());
  s.env = WithoutPerAttemptVariables(t->second.spec.env);
  s.stdout_fd = devnull_;
  s.stderr_fd = devnull_;
  const auto started = clock_->Now();
  StandbyProcess::Events ev;
  ev.on_ready = [this, id, started] {
    auto it = standbys_.find(id);
    LauncherLog()->info("warm restart: standby pid={} ready after {} ms",
                        it == standbys_.end() ? -1 : it->second->pid(),
                        Ms(clock_->Now() - started));
    pool_.Ready(id);
    Act();
  };
  ev.on_broken = [this, id](const std::string& reason, const std::string& detail) {
    auto it = standbys_.find(id);
    LauncherLog()->warn("warm restart: standby pid={} cannot serve reason={} {}",
                        it == standbys_.end() ? -1 : it->second->pid(), reason, detail);
    pool_.Broken(id, reason, detail, clock_->Now());
    Act();
  };
  ev.on_exit = [this, id](const ExitStatus& status) {
    const auto state = pool_.state(id);
    auto it = standbys_.find(id);
    const pid_t pid = it == standbys_.end() ? -1 : it->second->pid();
    if (state && *state != StandbyState::kDead) {
      LauncherLog()->warn("warm restart: standby pid={} died how=\"{}\" state={}", pid,
                          status.Describe(), StandbyStateName(*state));
    }
    pool_.Exited(id, "\"" + status.Describe() + "\"", clock_->Now());
    if (it != standbys_.end()) standbys_.erase(it);  // inside its exit handler: allowed
    Act();
  };
  auto p = StandbyProcess::Start(io_, *inner_, std::move(s), std::move(ev));
  if (!p) {
    LauncherLog()->warn("warm restart: cannot start a standby: {}", p.error().message);
    pool_.SpawnFailed(id, "\"" + p.error().message + "\"", clock_->Now());
    return;
  }
  LauncherLog()->debug("warm restart: standby pid={} starting", (*p)->pid());
  standbys_[id] = std::move(*p);
}

void WarmSpawner::CollectStrays(std::function<void()> done) {
  inner_->CollectStrays(std::move(done));
}

void WarmSpawner::Prepare(const std::vector<ProcessSpec>& specs) {
  if (started_before_ || prepared_ || pool_.off()) return;
  std::map<std::string, int> keys;
  for (const auto& spec : specs) {
    auto cmd = ParsePythonCommand(spec, opts_.python);
    if (!cmd) {
      LauncherLog()->info("warm restart: no standbys to prepare: {}", cmd.error().message);
      return;
    }
    const std::string key = StandbyKey(spec, *cmd);
    templates_[key] = Template{spec, *cmd};
    ++keys[key];
  }
  if (keys.empty()) return;
  prepared_ = true;
  LauncherLog()->info("warm restart: preparing {} standby(s) before this node's first workers",
                      specs.size());
  pool_.Want(keys, clock_->Now());
  Act();
}

void WarmSpawner::Shutdown() {
  for (uint64_t id : pool_.Shutdown()) {
    if (auto it = standbys_.find(id); it != standbys_.end()) it->second->Kill();
  }
  timer_->Cancel();
  inner_->Shutdown();
}

std::unique_ptr<Spawner> MakeSpawner(boost::asio::io_context& io, const LaunchConfig& config) {
  auto inner = MakeProcessSpawner(io);
  if (!config.warm_restart.enabled) return inner;
  WarmSpawnerOptions o;
  o.python = config.python;
  o.preload = config.warm_restart.preload;
  o.bootstrap = config.warm_restart.bootstrap;
  return std::make_unique<WarmSpawner>(io, std::move(inner), std::move(o));
}

}  // namespace ftrun::launcher
