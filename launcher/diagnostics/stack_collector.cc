#include "launcher/diagnostics/stack_collector.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <filesystem>
#include <fstream>
#include <list>
#include <sstream>

#include "common/log.h"
#include "launcher/diagnostics/python_stack_hook.h"
#include "launcher/workers/worker_process.h"

namespace ftrun::launcher {
namespace {

namespace fs = std::filesystem;

std::string ReadBounded(const std::string& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::string out(max_bytes + 1, '\0');
  in.read(out.data(), static_cast<std::streamsize>(out.size()));
  out.resize(static_cast<size_t>(in.gcount()));
  if (out.size() > max_bytes) {
    out.resize(max_bytes);
    out.resize(out.rfind('\n') == std::string::npos ? 0 : out.rfind('\n') + 1);  // whole lines
    out += "  ... (cut at " + std::to_string(max_bytes) + " bytes)\n";
  }
  return out;
}

// -1 when missing.
long long FileSize(const std::string& path) {
  std::error_code ec;
  auto n = fs::file_size(path, ec);
  return ec ? -1 : static_cast<long long>(n);
}

bool EndsLine(const std::string& path, long long size) {
  if (size <= 0) return false;
  std::ifstream in(path, std::ios::binary);
  in.seekg(size - 1);
  char c = 0;
  return in.get(c) && c == '\n';
}

}  // namespace

struct StackCollector::Run {
  struct Target {
    StackTarget t;
    bool handler = false;
    bool python_done = false;
    long long last_size = -1;
    std::string native_file;
    std::shared_ptr<bool> native_exited;  // null: no eu-stack run
    std::shared_ptr<bool> native_killed = std::make_shared<bool>(false);
    std::unique_ptr<WorkerProcess> native;
    bool was_stopped = false;  // the target was stopped before eu-stack attached it
    void KillNative(boost::asio::io_context& io);
  };
  std::vector<Target> targets;
  std::vector<Done> done;
  Clock::TimePoint deadline;
};

namespace {

// eu-stack runs still going at a deadline (killed): kept until their exit is seen, by the
// io_context they were started on. A service of that io_context, because their exit watches
// belong to it: when it is destroyed first (the agent exits, a test ends), the service's
// shutdown drops them while its reactor still exists, instead of a static list dropping them
// at the program's exit, after the reactor is gone (a crash at exit).
class LingeringRuns : public boost::asio::execution_context::service {
 public:
  using key_type = LingeringRuns;
  static inline boost::asio::execution_context::id id;
  explicit LingeringRuns(boost::asio::execution_context& context) : service(context) {}

  void Keep(std::shared_ptr<bool> exited, std::unique_ptr<WorkerProcess> process) {
    runs_.emplace_back(std::move(exited), std::move(process));
  }
  void DropExited() {
    runs_.remove_if([](const auto& e) { return *e.first; });
  }

 private:
  void shutdown() override { runs_.clear(); }
  std::list<std::pair<std::shared_ptr<bool>, std::unique_ptr<WorkerProcess>>> runs_;
};

LingeringRuns& Lingering(boost::asio::io_context& io) {
  return boost::asio::use_service<LingeringRuns>(io);
}

}  // namespace

// eu-stack attaches with ptrace, which stops the target with a SIGSTOP; killed before it
// detaches, it leaves that stop behind, and a live job's rank would stay stopped after a
// status order. A SIGCONT drops a stop still pending now; the exit handler sends another
// once the kernel has detached the target. A target stopped before (by someone else) is
// left as it was.
void StackCollector::Run::Target::KillNative(boost::asio::io_context& io) {
  *native_killed = true;
  native->Signal(SIGKILL);
  if (!was_stopped) ::kill(t.pid, SIGCONT);
  Lingering(io).Keep(native_exited, std::move(native));
}

StackCollector::StackCollector(boost::asio::io_context& io, Clock& clock,
                               StackCollectorOptions options)
    : io_(io), clock_(clock), opts_(std::move(options)), timer_(clock.NewTimer()) {}

StackCollector::~StackCollector() {
  *alive_ = false;
  timer_->Cancel();
  if (!run_) return;
  for (auto& t : run_->targets) {
    if (t.native && !*t.native_exited) t.KillNative(io_);
  }
}

bool StackCollector::CatchesSignal(pid_t pid, int sig) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("SigCgt:", 0) != 0) continue;
    const unsigned long long mask = std::stoull(line.substr(7), nullptr, 16);
    return sig >= 1 && sig <= 64 && (mask >> (sig - 1)) & 1ULL;
  }
  return false;
}

std::string StackCollector::FindEuStack(const EnvMap& env) {
  std::string path = FindProgram("eu-stack", env);
  return !path.empty() && ::access(path.c_str(), X_OK) == 0 ? path : "";
}

std::string StackCollector::NativeNote() const {
  return opts_.eu_stack.empty()
             ? "eu-stack is not installed (Debian: apt-get install elfutils)"
             : "eu-stack gave no stack (it needs ptrace rights over the workers)";
}

void StackCollector::Collect(std::vector<StackTarget> targets, Done done) {
  if (run_) {
    run_->done.push_back(std::move(done));
    return;
  }
  run_ = std::make_unique<Run>();
  run_->done.push_back(std::move(done));
  run_->deadline = clock_.Now() + opts_.deadline;
  for (const auto& t : targets) {
    Run::Target rt;
    rt.t = t;
    const std::string file = PythonStackFile(opts_.dump_dir, t.pid);
    rt.handler = opts_.signal > 0 && (t.has_handler || CatchesSignal(t.pid, opts_.signal));
    if (rt.handler) {
      ::truncate(file.c_str(), 0);  // an older dump must not pass for this one
      if (t.process) {
        t.process->Signal(opts_.signal);
      } else {
        ::kill(t.pid, opts_.signal);
      }
    }
    // Only a child this process started and has not reaped (a worker): never a pid that
    // names someone else's process, which ptrace would stop.
    if (!opts_.eu_stack.empty() && IsStartedChild(t.pid)) {
      const char state = ProcessStateLetter(t.pid);
      rt.was_stopped = state == 'T' || state == 't';
      rt.native_file = opts_.dump_dir + "/native-" + std::to_string(t.pid) + ".txt";
      int fd = ::open(rt.native_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      ProcessSpec spec;
      spec.program = opts_.eu_stack;
      spec.args = {"-p", std::to_string(t.pid)};
      spec.stdout_fd = fd;
      spec.stderr_fd = fd;
      auto exited = std::make_shared<bool>(false);
      auto p = WorkerProcess::Spawn(
          io_, spec,
          [this, exited, killed = rt.native_killed, pid = t.pid, resume = !rt.was_stopped,
           &io = io_, alive = std::weak_ptr<bool>(alive_)](const ExitStatus&) {
            *exited = true;
            if (*killed && resume) ::kill(pid, SIGCONT);
            // Not from inside the exit handler of a process the list owns.
            boost::asio::post(io, [&io] { Lingering(io).DropExited(); });
            if (alive.lock() && run_) Poll();
          });
      if (fd >= 0) ::close(fd);
      if (p) {
        rt.native = std::move(*p);
        rt.native_exited = exited;
      }
    }
    run_->targets.push_back(std::move(rt));
  }
  Poll();
}

void StackCollector::Poll() {
  bool all = true;
  for (auto& t : run_->targets) {
    if (t.handler && !t.python_done) {
      const std::string file = PythonStackFile(opts_.dump_dir, t.t.pid);
      const long long size = FileSize(file);
      t.python_done = size > 0 && size == t.last_size && EndsLine(file, size);
      t.last_size = size;
    }
    all = all && (!t.handler || t.python_done) && (!t.native_exited || *t.native_exited);
  }
  if (all || clock_.Now() >= run_->deadline) return Finish();
  timer_->Cancel();
  timer_->Start(opts_.poll, [this] { Poll(); });
}

void StackCollector::Finish() {
  timer_->Cancel();
  std::unique_ptr<Run> run = std::move(run_);
  std::vector<RankDump> dumps;
  const double limit = std::chrono::duration<double>(opts_.deadline).count();
  for (auto& t : run->targets) {
    RankDump d;
    d.rank = t.t.rank;
    d.pid = t.t.pid;
    d.host = opts_.host;
    if (t.handler) {
      d.python = ReadBounded(PythonStackFile(opts_.dump_dir, t.t.pid), opts_.max_bytes);
      if (!t.python_done) {
        d.note = fmt::format("did not finish writing its stack within {:g}s", limit);
      }
    } else {
      d.note = "no stack-dump handler (not a Python process, or Python started with -S/-I)";
    }
    if (t.native) {
      if (!*t.native_exited) t.KillNative(io_);
      d.native = ReadBounded(t.native_file, opts_.max_bytes);
    }
    dumps.push_back(std::move(d));
  }
  for (auto& done : run->done) done(dumps);
}

}  // namespace ftrun::launcher
