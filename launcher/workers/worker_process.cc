// The one translation unit that includes Boost.Process (v2, header-only; slow to compile): for
// finding a program on PATH; the child is started with fork and exec of our own (Spawn).
#include "launcher/workers/worker_process.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/process/v2/environment.hpp>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/fd_limit.h"
#include "common/log.h"
#include "launcher/workers/orphan_reaper.h"

namespace bp = boost::process::v2;

namespace ftrun::launcher {
namespace {

// What the child needs between fork and exec, all prepared before the fork: the child makes
// no allocation (the agent is multi-threaded: another thread may hold the allocator's lock at
// the fork, and not every allocator hands the child a usable one: GCC 12's libasan does not).
struct ChildPlan {
  pid_t parent;
  const char* exe;
  char* const* argv;
  char* const* envp;
  int stdio[3];    // the descriptor to become fd 0, 1, 2 (-1: the agent's own); none is 0-2
  rlim_t fd_soft;  // the open-file limit ftrun was started with (-1: unchanged)
  int error_pipe;  // close-on-exec, not 0-2: the child's errno goes here if it cannot exec
};

// The child could not get to exec: errno goes to the parent, the child exits.
[[noreturn]] void FailChild(int error_pipe) {
  const int err = errno;
  ssize_t ignored = ::write(error_pipe, &err, sizeof err);
  (void)ignored;
  ::_exit(127);
}

// The child, between fork and exec: async-signal-safe calls only.
[[noreturn]] void ExecChild(const ChildPlan& plan) {
  // The agent's signal handlers write into its loop's pipe, which the child shares until
  // exec: a signal caught here would be taken for one of the agent's. exec resets caught
  // signals to their default anyway.
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) != 0 || old.sa_handler == SIG_IGN ||
        old.sa_handler == SIG_DFL) {
      continue;
    }
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    ::sigaction(sig, &dfl, nullptr);
  }
  if (::setpgid(0, 0) != 0) FailChild(plan.error_pipe);
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) FailChild(plan.error_pipe);
  // The agent may have died before prctl took effect; then nobody would ever kill us.
  if (::getppid() != plan.parent) ::_exit(127);
  // The agent ignores SIGPIPE for its sockets; workers get the default back (as Python's
  // subprocess restores it), and nothing blocked.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  ::sigaction(SIGPIPE, &dfl, nullptr);
  ::sigaction(SIGXFSZ, &dfl, nullptr);
  sigset_t none;
  ::sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int target = 0; target < 3; ++target) {
    if (plan.stdio[target] >= 0 && plan.stdio[target] != target &&
        ::dup2(plan.stdio[target], target) < 0) {
      FailChild(plan.error_pipe);
    }
  }
  // Only fds 0-2 cross exec (the error pipe too, until exec succeeds: it is close-on-exec).
  if (::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
    struct rlimit rl {};
    rlim_t max_fd = ::getrlimit(RLIMIT_NOFILE, &rl) == 0 ? rl.rlim_cur : 1024;
    if (max_fd > 65536) max_fd = 65536;
    for (int fd = 3; fd < static_cast<int>(max_fd); ++fd) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
  // The agent raised its own open-file limit (common/fd_limit.h); workers get the one ftrun
  // was started with, as under torchrun (after the pass above, which needs the raised one).
  if (plan.fd_soft != static_cast<rlim_t>(-1)) {
    struct rlimit fds {};
    if (::getrlimit(RLIMIT_NOFILE, &fds) == 0) {
      fds.rlim_cur = plan.fd_soft;
      ::setrlimit(RLIMIT_NOFILE, &fds);
    }
  }
  ::execve(plan.exe, plan.argv, plan.envp);
  FailChild(plan.error_pipe);
}

// Waits for `pid` to exit (it has exited, or was just killed).
void Reap(pid_t pid) {
  while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
}

// Descriptors Spawn made for one fork, closed when it returns.
struct OwnedFds {
  std::vector<int> fds;
  ~OwnedFds() {
    for (int fd : fds) ::close(fd);
  }
  void Close(int fd) {
    ::close(fd);
    std::erase(fds, fd);
  }
  // `fd`, or a close-on-exec duplicate numbered 3 or above when it is one of 0-2 (so that
  // the child's dup2 onto 0-2 never overwrites a descriptor it still needs); -1 on error.
  int Above2(int fd) {
    if (fd < 0 || fd > 2) return fd;
    const int dup = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (dup >= 0) fds.push_back(dup);
    return dup;
  }
};

// Starts `exe` as `spec` says; its pid once it has exec'd. Blocks until then (the child
// reports an exec failure through a close-on-exec pipe before it exits). Errors name `exe`.
Result<pid_t> ForkExec(const std::string& exe, const ProcessSpec& spec) {
  auto error = [&exe](const std::string& what, int err) {
    return Error{"cannot start '" + exe + "': " + what + std::strerror(err)};
  };
  std::vector<std::string> env_strings = ToEnvStrings(spec.env);
  std::vector<char*> envp;
  envp.reserve(env_strings.size() + 1);
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> arg_strings{exe};  // argv[0]: the resolved path
  arg_strings.insert(arg_strings.end(), spec.args.begin(), spec.args.end());
  std::vector<char*> argv;
  argv.reserve(arg_strings.size() + 1);
  for (auto& a : arg_strings) argv.push_back(a.data());
  argv.push_back(nullptr);

  OwnedFds owned;
  int error_pipe[2];
  if (::pipe2(error_pipe, O_CLOEXEC) != 0) return error("pipe2: ", errno);
  owned.fds = {error_pipe[0], error_pipe[1]};
  const int write_end = owned.Above2(error_pipe[1]);
  if (write_end < 0) return error("fcntl: ", errno);
  if (write_end != error_pipe[1]) owned.Close(error_pipe[1]);  // the parent must hold one only
  ChildPlan plan{::getpid(),   exe.c_str(),           argv.data(), envp.data(),
                 {-1, -1, -1}, StartingFdSoftLimit(), write_end};
  const int wanted[3] = {spec.stdin_fd, spec.stdout_fd, spec.stderr_fd};
  for (int target = 0; target < 3; ++target) {
    plan.stdio[target] = wanted[target] == target ? -1 : owned.Above2(wanted[target]);
    if (wanted[target] >= 0 && wanted[target] != target && plan.stdio[target] < 0) {
      return error("fcntl: ", errno);
    }
  }
  // Every signal stays blocked in the child until it has reset the agent's handlers (it is in
  // the agent's process group until setpgid: a Ctrl-C there must not run them).
  sigset_t all, previous;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &previous);
  // Our own fork and exec rather than Boost.Process's launcher, whose child announces the
  // fork to an asio context (service_registry::notify_fork allocates) before exec.
  const pid_t pid = ::fork();
  if (pid == 0) ExecChild(plan);
  const int fork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (pid < 0) return error("fork: ", fork_errno);
  owned.Close(write_end);  // the child's end: EOF once it has exec'd
  int child_errno = 0;
  ssize_t n;
  do {
    n = ::read(error_pipe[0], &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  const int read_errno = errno;
  if (n == 0) return pid;
  if (n < 0) {  // cannot tell whether it started: it must not run unwatched
    ::kill(pid, SIGKILL);
    Reap(pid);
    return error("reading its exec status: ", read_errno);
  }
  Reap(pid);  // it could not exec and has exited
  return error("", child_errno);
}

// The children started here and not reaped yet (loop only, like every WorkerProcess; the mutex
// is for the odd helper started elsewhere).
std::mutex g_started_mutex;
std::set<pid_t> g_started;

void SetStarted(pid_t pid, bool started) {
  std::lock_guard<std::mutex> lock(g_started_mutex);
  if (started) {
    g_started.insert(pid);
  } else {
    g_started.erase(pid);
  }
}

ExitStatus DecodeWaitStatus(int status) {
  ExitStatus s;
  if (WIFSIGNALED(status)) {
    s.signal = WTERMSIG(status);
  } else if (WIFEXITED(status)) {
    s.code = WEXITSTATUS(status);
  }
  return s;
}

}  // namespace

std::string ExitStatus::Describe() const {
  if (signal != 0) {
    const char* name = ::sigabbrev_np(signal);
    return "signal " + std::to_string(signal) + " (SIG" + (name ? name : "?") + ")";
  }
  return "exit code " + std::to_string(code);
}

// The exit is awaited on a pidfd of our own rather than with Boost's process handle: on
// "readable" that handle calls a blocking waitpid, and the chaos run caught the pidfd of a
// live worker reported readable (after a restarted master, a worker's exit started the next
// round's worker and then dropped its own pidfd): the agent's loop blocked until that worker
// exited, a minute later. Here waitpid(WNOHANG) decides and a spurious wakeup waits again,
// and the pidfd is deregistered (release) before it is closed, so that no registration can
// outlive it.
struct WorkerProcess::Impl {
  explicit Impl(boost::asio::posix::stream_descriptor d) : pidfd(std::move(d)) {}
  ~Impl() {
    if (pidfd.is_open()) ::close(pidfd.release());
  }
  boost::asio::posix::stream_descriptor pidfd;
};

WorkerProcess::WorkerProcess(pid_t pid, std::unique_ptr<Impl> impl)
    : pid_(pid), impl_(std::move(impl)), alive_(std::make_shared<bool>(true)) {}

WorkerProcess::~WorkerProcess() {
  *alive_ = false;
  if (!exited_) {
    WorkerLog()->warn("worker process object dropped while pid={} still runs", pid_);
  }
}

bool IsStartedChild(pid_t pid) {
  std::lock_guard<std::mutex> lock(g_started_mutex);
  return g_started.count(pid) != 0;
}

char ProcessStateLetter(pid_t pid) {
  // read(2), not a stream: a process that exits between open and read makes read fail with
  // ESRCH, which libstdc++'s filebuf would throw.
  const int fd = ::open(("/proc/" + std::to_string(pid) + "/stat").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char text[512];
  const ssize_t n = ::read(fd, text, sizeof text - 1);
  ::close(fd);
  if (n <= 0) return 0;
  text[n] = '\0';
  const char* paren = std::strrchr(text, ')');  // the command may hold spaces and parentheses
  if (paren == nullptr || paren[1] == '\0' || paren[2] == '\0') return 0;
  return paren[2];
}

std::string FindProgram(const std::string& program, const EnvMap& env) {
  if (program.find('/') != std::string::npos) return program;
  return bp::environment::find_executable(program, env).string();
}

Result<std::unique_ptr<WorkerProcess>> WorkerProcess::Spawn(boost::asio::io_context& io,
                                                            const ProcessSpec& spec,
                                                            ExitHandler on_exit) {
  std::string exe = FindProgram(spec.program, spec.env);
  if (exe.empty()) {
    return Error{"cannot start '" + spec.program + "': not found in PATH"};
  }
  auto started = ForkExec(exe, spec);
  if (!started) return started.error();
  const pid_t pid = *started;
  SetStarted(pid, true);
  const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));  // close-on-exec
  if (fd < 0) {
    const int err = errno;
    ::kill(pid, SIGKILL);
    Reap(pid);  // it was just killed: returns at once
    SetStarted(pid, false);
    return Error{"cannot watch '" + exe + "' (pidfd_open): " + std::strerror(err)};
  }
  auto impl = std::make_unique<Impl>(boost::asio::posix::stream_descriptor(io, fd));
  std::unique_ptr<WorkerProcess> wp(new WorkerProcess(pid, std::move(impl)));
  wp->on_exit_ = std::move(on_exit);
  wp->AwaitExit();
  return wp;
}

void WorkerProcess::AwaitExit() {
  std::weak_ptr<bool> alive = alive_;
  impl_->pidfd.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                          [this, alive](const boost::system::error_code& ec) {
                            auto a = alive.lock();
                            if (!a || !*a) return;  // the owner dropped us first
                            int status = 0;
                            const pid_t r = ::waitpid(pid_, &status, WNOHANG);
                            if (r == 0 && !ec)
                              return AwaitExit();  // a spurious wakeup: it still runs
                            if (r == pid_) SetStarted(pid_, false);
                            if (r != pid_) {
                              // Cannot normally happen (the child is ours); report a failure rather
                              // than hang.
                              WorkerLog()->error(
                                  "waiting for pid={} failed: {}", pid_,
                                  ec ? ec.message() : std::string(std::strerror(errno)));
                              status = 0xff00;  // exit code 255
                            }
                            exited_ = true;
                            auto on_exit = std::move(on_exit_);  // it may destroy this object
                            on_exit(DecodeWaitStatus(status));
                          });
}

void WorkerProcess::SignalGroup(int sig) {
  if (exited_) {
    // The leader is reaped, so its pid may be reused; the group id stays reserved while any
    // member lives, so signalling the group is still safe and reaches leftover grandchildren.
    if (::kill(-pid_, sig) != 0 && errno != ESRCH) {
      WorkerLog()->debug("kill(-{}, {}) failed: {}", pid_, sig, std::strerror(errno));
    }
    return;
  }
  if (::kill(-pid_, sig) != 0) {
    // Between fork and setpgid the group does not exist yet: signal the child itself.
    if (errno == ESRCH) ::kill(pid_, sig);
  }
}

void WorkerProcess::Signal(int sig) {
  if (!exited_) ::kill(pid_, sig);
}

namespace {

class ProcessSpawner : public Spawner {
 public:
  // The agent's spawner: from now on the agent adopts its workers' escaped descendants.
  explicit ProcessSpawner(boost::asio::io_context& io) : io_(io), reaper_(io) {
    if (auto s = OrphanReaper::BecomeSubreaper(); !s) {
      WorkerLog()->warn("{}: processes that leave a worker's process group may outlive the job",
                        s.error().message);
    }
  }
  void CollectStrays(std::function<void()> done) override {
    reaper_.KillAdopted([done = std::move(done)](size_t) { done(); });
  }
  Result<std::unique_ptr<ChildProcess>> Spawn(const ProcessSpec& spec,
                                              ExitHandler on_exit) override {
    auto p = WorkerProcess::Spawn(io_, spec, std::move(on_exit));
    if (!p) return p.error();
    return std::unique_ptr<ChildProcess>(std::move(*p));
  }

 private:
  boost::asio::io_context& io_;
  OrphanReaper reaper_;
};

}  // namespace

std::unique_ptr<Spawner> MakeProcessSpawner(boost::asio::io_context& io) {
  return std::make_unique<ProcessSpawner>(io);
}

}  // namespace ftrun::launcher
