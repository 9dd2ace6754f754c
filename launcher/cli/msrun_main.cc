#include "launcher/cli/msrun_main.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <future>
#include <iostream>
#include <regex>

#include "common/json_message.h"
#include "common/log.h"
#include "launcher/cli/msrun_args.h"
#include "launcher/cli/run_job.h"
#include "launcher/config/host.h"
#include "launcher/personality/msrun/msrun_config.h"
#include "launcher/personality/msrun/msrun_plan.h"
#include "launcher/workers/output_tee.h"
#include "launcher/workers/worker_process.h"

namespace ftrun::launcher {
namespace {

std::vector<int> AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int i = 0; i < CPU_SETSIZE; ++i) {
    if (CPU_ISSET(i, &set)) cpus.push_back(i);
  }
  return cpus;
}

// msrun creates a missing --log_dir (and its missing parents) with mode 0700.
Status CreateLogDir(const std::string& dir) {
  if (dir.empty()) return {};
  std::filesystem::path path;
  for (const auto& part : std::filesystem::path(dir)) {
    path /= part;
    if (::mkdir(path.c_str(), 0700) == 0) {
      ::chmod(path.c_str(), 0700);  // whatever the umask
    } else if (errno != EEXIST) {
      return Error{"--log_dir: cannot create " + path.string() + ": " + std::strerror(errno)};
    }
  }
  if (!std::filesystem::is_directory(dir)) {
    return Error{"--log_dir: " + dir + " is not a directory"};
  }
  return {};
}

// --worker_log_name: {ip} is this host's address toward the master, {hostname} its name.
std::string WorkerLogBase(const MsrunConfig& c, const std::string& master_ip) {
  if (c.worker_log_name.empty()) return "worker";
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  std::string base =
      std::regex_replace(c.worker_log_name, std::regex("\\{ip\\}"), LocalAddressToward(master_ip));
  return std::regex_replace(base, std::regex("\\{hostname\\}"), std::string(name));
}

int DryRun(const MsrunConfig& c, const EnvMap& env, bool scheduler_here) {
  PrintDryRunSummary(c.launch, "", std::cout);
  const std::string dir = c.log_dir.empty() ? "." : c.log_dir;
  std::cout << "  msrun:          worker_num " << c.worker_num << ", local_worker_num "
            << c.local_worker_num << ", node_rank " << c.node_rank << ", scheduler at "
            << c.master_addr << ":" << c.master_port << (c.simulation ? " (simulation)" : "")
            << "\n"
            << "  scheduler:      "
            << (c.simulation     ? "none (simulation)"
                : scheduler_here ? "on this node (master_addr is this host)"
                                 : "not on this node")
            << "\n"
            << "  logs:           " << dir << "/scheduler.log, " << dir << "/"
            << (c.worker_log_name.empty() ? "worker" : c.worker_log_name) << "_<rank>.log\n"
            << "  join:           " << (c.join ? "True (foreground)" : "False (background)")
            << "\n";
  std::string program = FindProgram(c.command.front(), env);
  std::cout << "  worker 0 runs:  "
            << (program.empty() ? c.command.front() + " (not found in PATH)" : program);
  for (size_t i = 1; i < c.command.size(); ++i) std::cout << " " << c.command[i];
  std::cout << std::endl;
  JsonMessage json("dry_run");  // the same for programs (tests/corpus): every word exactly
  json.Set("worker_num", c.worker_num)
      .Set("local_worker_num", c.local_worker_num)
      .Set("node_rank", c.node_rank)
      .Set("master", c.master_addr + ":" + std::to_string(c.master_port))
      .Set("worker0_argv", c.command);
  std::cout << "  as json:        " << json.str() << std::endl;
  return 0;
}

// --join False: a supervisor in its own session keeps the job; this process returns once it
// is up. Until then the supervisor writes to our terminal (so start-up errors are seen); from
// then on into <log_dir>/ftrun.log. Returns, in the supervisor, the fd to signal readiness
// on; in the caller it exits with 0 (ready) or the supervisor's exit code.
Result<int> Detach(const std::string& log_path) {
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) return Error{std::string("pipe: ") + std::strerror(errno)};
  std::cout.flush();
  std::cerr.flush();
  const pid_t pid = ::fork();
  if (pid < 0) return Error{std::string("fork: ") + std::strerror(errno)};
  if (pid == 0) {
    ::close(ready[0]);
    ::setsid();
    int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null >= 0) {
      ::dup2(null, STDIN_FILENO);
      ::close(null);
    }
    return ready[1];
  }
  ::close(ready[1]);
  char c = 0;
  ssize_t n;
  do {
    n = ::read(ready[0], &c, 1);
  } while (n < 0 && errno == EINTR);
  if (n == 1) {
    std::cerr << "msrun: the job runs in the background, supervised by ftrun (pid " << pid
              << "); its log: " << log_path << std::endl;
    std::exit(0);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  std::exit(WIFEXITED(status) && WEXITSTATUS(status) != 0 ? WEXITSTATUS(status) : 1);
}

// In the detached supervisor: tell the waiting shell we run, and log into the file from now.
void SignalReady(int ready_fd, const std::string& log_path) {
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  const char r = 'R';
  WriteAll(ready_fd, &r, 1);
  ::close(ready_fd);
  int fd = OpenLogFile(log_path, true);
  if (fd < 0) return;
  ::dup2(fd, STDOUT_FILENO);
  ::dup2(fd, STDERR_FILENO);
  ::close(fd);
}

}  // namespace

int RunMsrun(const std::vector<std::string>& argv) {
  ParsedMsrun parsed = ParseMsrunArgs(argv);
  if (auto code = ExitCodeIfNotRun(parsed, "msrun")) return *code;
  EnvMap env = CurrentEnvironment();
  auto built = BuildMsrunConfig(parsed.args, env, AllowedCpus());
  if (!built) return UsageError("msrun", parsed.Blame(built.error().message));
  MsrunConfig& c = *built;
  InitLogging(c.launch.log_level);
  auto log = MsrunLog();
  for (const auto& w : c.warnings) log->warn("{}", w);
  if (c.command.front() == "python" && FindProgram("python", env).empty() &&
      !FindProgram("python3", env).empty()) {
    log->warn("no 'python' in PATH; running the task with python3");
    c.command.front() = "python3";
    c.launch.script = "python3";
  }
  const bool single_node = c.launch.max_nodes == 1;
  // msrun's rule on one node; with several, the master node is the one that hosts ftrun's
  // rendezvous (the first agent on master_addr), known once it has bound the port.
  const bool master_here = IsThisHost(c.master_addr, "");
  if (c.launch.dry_run) return DryRun(c, env, master_here);

  auto master_ip = ResolveIPv4(c.master_addr);
  if (!master_ip) {
    log->error("--master_addr: {}", master_ip.error().message);
    return 1;
  }
  if (auto s = CreateLogDir(c.log_dir); !s) {
    log->error("{}", s.error().message);
    return 1;
  }
  const std::string log_base = WorkerLogBase(c, *master_ip);
  const std::string supervisor_log =
      (std::filesystem::path(c.log_dir.empty() ? "." : c.log_dir) / "ftrun.log").string();
  log->info(
      "starting worker_num={} local_worker_num={} node_rank={} master={}:{} "
      "max_restarts={} join={} log_dir={}",
      c.worker_num, c.local_worker_num, c.node_rank, *master_ip, c.master_port,
      c.launch.max_restarts, c.join ? "True" : "False",
      c.log_dir.empty() ? std::filesystem::current_path().string() : c.log_dir);

  JobHooks hooks;
  hooks.agent_store = false;
  // Only a --log_dir of its own: the current directory gets no files msrun would not write.
  if (!c.log_dir.empty()) hooks.run_dir = c.log_dir;
  int ready_fd = -1;
  if (!c.join) {
    // Before any thread exists: fork() keeps only the calling thread.
    auto fd = Detach(supervisor_log);
    if (!fd) {
      log->error("cannot start the background supervisor: {}", fd.error().message);
      return 1;
    }
    ready_fd = *fd;
    hooks.on_ready = [ready_fd, supervisor_log] { SignalReady(ready_fd, supervisor_log); };
  } else {
    // msrun says it once its processes exist; on several nodes that is after the rendezvous.
    hooks.on_workers_started = [log] {
      log->warn("Distributed job is spawned. Waiting all processes to exit...");
    };
  }
  // msrun exits 0 after Ctrl-C; any other signal ends it as that signal would.
  hooks.signal_exit_code = [](int sig) { return sig == SIGINT ? 0 : 128 + sig; };
  hooks.make_planner = [&](bool hosts_rendezvous) -> Result<std::unique_ptr<WorkerPlanner>> {
    const bool scheduler = single_node ? master_here : hosts_rendezvous;
    if (!single_node) {
      log->info("the scheduler runs {}",
                scheduler ? "on this node (it hosts the rendezvous)" : "on the master node");
    }
    return std::unique_ptr<WorkerPlanner>(
        std::make_unique<MsrunPlanner>(c, env, *master_ip, scheduler, log_base));
  };
  std::shared_future<std::string> host =
      std::async(std::launch::async, FullyQualifiedHostname).share();
  return RunJob(c.launch, env, host, std::move(hooks));
}

}  // namespace ftrun::launcher
