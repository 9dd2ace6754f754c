#include "launcher/worker_group.h"

#include <fcntl.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>

#include "launcher/log_dir.h"
#include "launcher/template.h"
#include "launcher/worker_env.h"
#include "rendezvous/log.h"

namespace ftrun::launcher {
namespace {

// --run-path: torchrun runs the script with runpy.run_path in a child interpreter.
constexpr const char* kRunPathShim =
    "import runpy, sys; sys.argv = sys.argv[1:]; "
    "runpy.run_path(sys.argv[0], run_name='__main__')";

// A closed-on-scope-exit descriptor.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

WorkerCommand BuildWorkerCommand(const LaunchConfig& c, int local_rank) {
  const std::map<std::string, std::string> vars = {{"local_rank", std::to_string(local_rank)}};
  WorkerCommand cmd;
  std::vector<std::string> args;
  switch (c.entry) {
    case EntryKind::kNoPython:
      cmd.program = c.script;
      break;
    case EntryKind::kPython:
      cmd.program = c.python;
      args = {"-u", c.script};
      break;
    case EntryKind::kModule:
      cmd.program = c.python;
      args = {"-u", "-m", c.script};
      break;
    case EntryKind::kRunPath:
      cmd.program = c.python;
      args = {"-u", "-c", kRunPathShim, c.script};
      break;
  }
  args.insert(args.end(), c.script_args.begin(), c.script_args.end());
  for (auto& a : args) cmd.args.push_back(SafeSubstitute(a, vars));
  return cmd;
}

std::string EntrypointName(const LaunchConfig& c) { return c.script; }

WorkerGroup::WorkerGroup(boost::asio::io_context& io, WorkerGroupOptions options,
                         ExitHandler on_exit, std::function<void()> on_all_exited)
    : io_(io),
      opts_(std::move(options)),
      on_exit_(std::move(on_exit)),
      on_all_exited_(std::move(on_all_exited)),
      grace_timer_(io) {}

WorkerGroup::~WorkerGroup() { grace_timer_.cancel(); }

Status WorkerGroup::Start() {
  const LaunchConfig& c = *opts_.config;
  const int nproc = c.nproc_per_node;
  // Validated at start-up, so these cannot fail here.
  redirects_ = ParseStdSpec("--redirects", c.redirects_spec, nproc).value();
  tees_ = ParseStdSpec("--tee", c.tee_spec, nproc).value();
  if (!opts_.attempt_dir.empty()) {
    auto open_filter = [&](const std::vector<std::string>& filters, const char* name) {
      auto f = std::make_shared<SharedFile>();
      if (!filters.empty()) {
        f->fd = OpenLogFile((std::filesystem::path(opts_.attempt_dir) / name).string(), true);
      }
      return f;
    };
    filtered_stdout_ = open_filter(c.duplicate_stdout_filters, "filtered_stdout.log");
    filtered_stderr_ = open_filter(c.duplicate_stderr_filters, "filtered_stderr.log");
  }
  workers_.resize(nproc);
  for (int lr = 0; lr < nproc; ++lr) {
    Worker& w = workers_[lr];
    w.local_rank = lr;
    w.rank = opts_.assignment.base_rank + lr;
    w.error_file = RunLogDir::RankFile(opts_.attempt_dir, lr, "error.json");
    if (auto s = StartWorker(w); !s) {
      workers_.resize(lr);  // only the started ones count
      Stop(SIGKILL, std::chrono::milliseconds(0));
      if (started_ == 0) {
        boost::asio::post(io_, [this] {
          if (!all_exited_reported_) {
            all_exited_reported_ = true;
            on_all_exited_();
          }
        });
      }
      return s.error().Wrap("local_rank " + std::to_string(lr));
    }
  }
  return {};
}

Result<int> WorkerGroup::StreamFd(Worker& w, int bit, int redirect, int tee) {
  const LaunchConfig& c = *opts_.config;
  const bool is_out = bit == kStdOut;
  const bool shown = !c.local_ranks_filter || c.local_ranks_filter->count(w.local_rank) != 0;
  const std::string file =
      RunLogDir::RankFile(opts_.attempt_dir, w.local_rank, is_out ? "stdout.log" : "stderr.log");
  if (tee & bit) {
    TeeOptions t;
    t.log_file = file;
    t.console_fd = shown ? (is_out ? STDOUT_FILENO : STDERR_FILENO) : -1;
    std::string tmpl = c.line_prefix_template.empty() ? "[${role_name}${local_rank}]:"
                                                      : c.line_prefix_template;
    t.prefix = SafeSubstitute(tmpl, {{"role_name", c.role},
                                     {"rank", std::to_string(w.rank)},
                                     {"local_rank", std::to_string(w.local_rank)}});
    t.filters = is_out ? c.duplicate_stdout_filters : c.duplicate_stderr_filters;
    t.filter_file = is_out ? filtered_stdout_ : filtered_stderr_;
    auto tee_obj = OutputTee::Create(io_, std::move(t));
    if (!tee_obj) return tee_obj.error();
    int fd = (*tee_obj)->write_fd();
    w.tees.push_back(std::move(*tee_obj));
    return fd;
  }
  std::string target;
  if (redirect & bit) {
    target = file.empty() ? "/dev/null" : file;
  } else if (!shown) {
    target = "/dev/null";  // --local-ranks-filter silences the other ranks
  } else {
    return -1;  // inherit ftrun's own stream
  }
  int fd = OpenLogFile(target);
  if (fd < 0) return Error{"cannot open " + target + ": " + std::strerror(errno)};
  return fd;
}

Status WorkerGroup::StartWorker(Worker& w) {
  const LaunchConfig& c = *opts_.config;
  const int redirect = redirects_[w.local_rank] | tees_[w.local_rank];  // tee implies redirect
  const int tee = tees_[w.local_rank];
  Fd out, err;
  size_t tees_before = w.tees.size();
  // Tee pipes are owned by their OutputTee; plain files are closed once the child has them.
  auto o = StreamFd(w, kStdOut, redirect, tee);
  if (!o) return o.error();
  if (!(tee & kStdOut)) out.fd = *o;
  auto e = StreamFd(w, kStdErr, redirect, tee);
  if (!e) {
    w.tees.resize(tees_before);
    return e.error();
  }
  if (!(tee & kStdErr)) err.fd = *e;

  WorkerCommand cmd = BuildWorkerCommand(c, w.local_rank);
  ProcessSpec spec;
  spec.program = cmd.program;
  spec.args = cmd.args;
  spec.env = BuildWorkerEnv(
      {*opts_.agent_env, c, opts_.assignment, w.local_rank, w.error_file});
  for (const auto& [k, v] : opts_.extra_env) spec.env[k] = v;
  spec.stdout_fd = *o;
  spec.stderr_fd = *e;
  size_t index = static_cast<size_t>(&w - workers_.data());
  auto proc = WorkerProcess::Spawn(io_, spec, [this, index](const ExitStatus& s) {
    OnExit(index, s);
  });
  for (size_t i = tees_before; i < w.tees.size(); ++i) w.tees[i]->CloseWriteEnd();
  if (!proc) {
    w.tees.resize(tees_before);
    return proc.error();
  }
  w.process = std::move(*proc);
  ++started_;
  for (size_t i = tees_before; i < w.tees.size(); ++i) w.tees[i]->Start();
  Logger("launcher")
      ->info("worker started local_rank={} rank={} pid={} attempt={} round={}", w.local_rank,
             w.rank, w.process->pid(), opts_.assignment.restart_count, opts_.assignment.round);
  return {};
}

void WorkerGroup::OnExit(size_t index, const ExitStatus& status) {
  Worker& w = workers_[index];
  w.status = status;
  for (auto& t : w.tees) t->Drain();
  on_exit_(w);
  if (live_count() == 0 && !all_exited_reported_) {
    all_exited_reported_ = true;
    grace_timer_.cancel();
    // Leftover grandchildren in the workers' process groups must not outlive the attempt.
    for (auto& other : workers_) {
      if (other.process) other.process->SignalGroup(SIGKILL);
    }
    on_all_exited_();
  }
}

size_t WorkerGroup::live_count() const {
  size_t n = 0;
  for (const auto& w : workers_) {
    if (w.process && !w.process->exited()) ++n;
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
        Logger("launcher")->info("sending {} to worker local_rank={} pid={}", SignalName(sig),
                                 w.local_rank, w.process->pid());
      }
      w.process->SignalGroup(sig);  // an exited worker's group may still hold grandchildren
    }
  }
  if (sig == SIGKILL || grace.count() == 0) {
    KillRemaining();
    return;
  }
  if (!first || live_count() == 0) return;
  grace_timer_.expires_after(grace);
  grace_timer_.async_wait([this, grace](const boost::system::error_code& ec) {
    if (ec) return;
    for (auto& w : workers_) {
      if (w.process && !w.process->exited()) {
        Logger("launcher")->warn(
            "worker local_rank={} pid={} still running {} ms after the stop signal; sending "
            "SIGKILL",
            w.local_rank, w.process->pid(), grace.count());
      }
    }
    KillRemaining();
  });
}

void WorkerGroup::KillRemaining() {
  grace_timer_.cancel();
  for (auto& w : workers_) {
    if (w.process && !w.process->exited()) w.process->SignalGroup(SIGKILL);
  }
}

}  // namespace ftrun::launcher
