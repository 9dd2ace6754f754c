// SwitchboxCheck (declared in switchbox.h): runs one probe process per GPU pair, captures its
// stdout through a pipe read on the loop, and kills what is left at the time limit.
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <cstring>
#include <map>

#include "common/log.h"
#include "launcher/netcheck/switchbox.h"
#include "launcher/workers/template.h"
#include "launcher/workers/worker_process.h"

namespace ftrun::launcher {
namespace {

namespace asio = boost::asio;
constexpr size_t kMaxCapture = 1 << 20;  // of a probe's stdout; the rest is read and dropped

}  // namespace

std::vector<std::string> ProbeArgv(const std::vector<std::string>& command, const BoxPair& pair) {
  std::map<std::string, std::string> vars = {
      {"gpu_a", std::to_string(pair.a)}, {"gpu_b", std::to_string(pair.b)}, {"pair", pair.Name()}};
  std::vector<std::string> argv;
  bool templated = false;
  for (const auto& arg : command) {
    std::string s = SafeSubstitute(arg, vars);
    templated = templated || s != SafeSubstitute(arg, {});  // ($$ alone is no placeholder)
    argv.push_back(std::move(s));
  }
  if (!templated) {
    argv.push_back("--pairs");
    argv.push_back(pair.Name());
  }
  return argv;
}

struct SwitchboxCheck::State : std::enable_shared_from_this<SwitchboxCheck::State> {
  struct Probe {
    BoxPair pair;
    std::unique_ptr<WorkerProcess> proc;
    std::unique_ptr<asio::posix::stream_descriptor> pipe;
    std::vector<char> buf = std::vector<char>(64 * 1024);
    std::string out;
    bool exited = false;
    ExitStatus status;
    bool eof = false;
    bool timed_out = false;
    bool finished = false;
    BoxPairResult result;
  };

  State(asio::io_context& io, SwitchboxOptions o, Handler h)
      : io(io), opts(std::move(o)), done(std::move(h)), timer(io) {}

  void StartAll() {
    auto self = shared_from_this();
    remaining = opts.pairs.size();
    for (const auto& pair : opts.pairs) {
      probes.push_back(std::make_unique<Probe>());
      probes.back()->pair = pair;
    }
    timer.expires_after(opts.time_limit);
    timer.async_wait([self](const boost::system::error_code& ec) {
      if (!ec) self->TimeLimit();
    });
    for (size_t i = 0; i < probes.size(); ++i) StartOne(i);
    if (probes.empty()) Complete();
  }

  void StartOne(size_t i) {
    Probe& p = *probes[i];
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
      return Finish(i, false, fmt::format("cannot create a pipe: {}", std::strerror(errno)));
    }
    std::vector<std::string> argv = ProbeArgv(opts.probe_command, p.pair);
    ProcessSpec spec;
    spec.program = argv[0];
    spec.args.assign(argv.begin() + 1, argv.end());
    spec.env = opts.env;
    spec.stdout_fd = fds[1];
    auto self = shared_from_this();
    auto proc =
        WorkerProcess::Spawn(io, spec, [self, i](const ExitStatus& st) { self->OnExit(i, st); });
    ::close(fds[1]);
    if (!proc) {
      ::close(fds[0]);
      return Finish(i, false, proc.error().message);
    }
    p.proc = std::move(*proc);
    p.pipe = std::make_unique<asio::posix::stream_descriptor>(io, fds[0]);
    LauncherLog()->debug("switchbox probe for {} started pid={}", p.pair.Name(), p.proc->pid());
    Read(i);
  }

  void Read(size_t i) {
    auto self = shared_from_this();
    Probe& p = *probes[i];
    p.pipe->async_read_some(asio::buffer(p.buf),
                            [self, i](const boost::system::error_code& ec, size_t n) {
                              Probe& p = *self->probes[i];
                              self->Consume(p, n);
                              if (!ec) return self->Read(i);
                              self->Drain(p);
                              p.eof = true;
                              self->MaybeFinish(i);
                            });
  }

  void Consume(Probe& p, size_t n) {
    size_t keep = std::min(n, kMaxCapture - std::min(kMaxCapture, p.out.size()));
    p.out.append(p.buf.data(), keep);
  }

  // After the exit: take what the pipe still holds without waiting (a leftover grandchild may
  // keep it open), then close it.
  void Drain(Probe& p) {
    if (!p.pipe->is_open()) return;
    int fd = p.pipe->native_handle();
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    for (;;) {
      ssize_t n = ::read(fd, p.buf.data(), p.buf.size());
      if (n > 0) {
        Consume(p, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      break;
    }
    boost::system::error_code ec;
    p.pipe->close(ec);
  }

  void OnExit(size_t i, const ExitStatus& st) {
    Probe& p = *probes[i];
    p.exited = true;
    p.status = st;
    // The pending read ends with operation_aborted (or EOF) and drains the rest.
    boost::system::error_code ec;
    if (!p.eof) p.pipe->cancel(ec);
    MaybeFinish(i);
  }

  void MaybeFinish(size_t i) {
    Probe& p = *probes[i];
    if (p.finished || !p.exited || !p.eof) return;
    ParsedProbeOutput parsed = ParseProbeOutput(p.out, {p.pair});
    for (const auto& g : parsed.garbage) {
      LauncherLog()->warn("switchbox probe for {} printed garbage: {}", p.pair.Name(), g);
    }
    const BoxPairResult& r = parsed.pairs.front();
    if (p.timed_out) {
      return Finish(i, false,
                    fmt::format("timed out after {:g} s",
                                std::chrono::duration<double>(opts.time_limit).count()));
    }
    if (!p.status.Succeeded()) {
      std::string why = "probe ended with " + p.status.Describe();
      if (!r.ok && r.reason.rfind("no result", 0) != 0) why += ": " + r.reason;
      return Finish(i, false, why);
    }
    if (r.ok) return Finish(i, true, "", r.mbps);
    Finish(i, false, r.reason);
  }

  void Finish(size_t i, bool ok, std::string reason, double mbps = 0) {
    Probe& p = *probes[i];
    p.finished = true;
    p.result = BoxPairResult{p.pair, ok, mbps, std::move(reason)};
    if (!cancelled) {
      LauncherLog()->info("switchbox pair {}: {}", p.pair.Name(),
                          ok ? fmt::format("{:.1f} MB/s", mbps) : p.result.reason);
    }
    if (--remaining == 0) Complete();
  }

  void TimeLimit() {
    for (auto& p : probes) {
      if (p->finished || p->exited || !p->proc) continue;
      p->timed_out = true;
      LauncherLog()->warn("switchbox probe for {} (pid={}) still runs after {} ms: killing it",
                          p->pair.Name(), p->proc->pid(), opts.time_limit.count());
      p->proc->SignalGroup(SIGKILL);
    }
  }

  // Runs the handler from a fresh stack: Finish may be reached inside Start.
  void Complete() {
    timer.cancel();
    if (completed || !done) return;
    completed = true;
    std::vector<BoxPairResult> results;
    for (const auto& p : probes) results.push_back(p->result);
    SwitchboxReport report =
        JudgeSwitchbox(std::move(results), opts.min_bandwidth_mbps, opts.min_channels);
    asio::post(io, [self = shared_from_this(), report = std::move(report)]() mutable {
      Handler h = std::move(self->done);
      self->done = nullptr;
      if (h) h(std::move(report));
    });
  }

  void Cancel() {
    cancelled = true;
    done = nullptr;
    timer.cancel();
    for (auto& p : probes) {
      if (p->proc && !p->exited) p->proc->SignalGroup(SIGKILL);
    }
  }

  asio::io_context& io;
  SwitchboxOptions opts;
  Handler done;
  asio::steady_timer timer;
  std::vector<std::unique_ptr<Probe>> probes;
  size_t remaining = 0;
  bool completed = false;
  bool cancelled = false;  // the owner is gone: kill, reap, say nothing
};

Result<std::unique_ptr<SwitchboxCheck>> SwitchboxCheck::Start(asio::io_context& io,
                                                              SwitchboxOptions options,
                                                              Handler done) {
  if (options.probe_command.empty() || options.probe_command[0].empty()) {
    return Error{"--switchbox-probe: no command given"};
  }
  if (FindProgram(options.probe_command[0], options.env).empty()) {
    return Error{"--switchbox-probe: '" + options.probe_command[0] + "' not found in PATH"};
  }
  if (::access(FindProgram(options.probe_command[0], options.env).c_str(), X_OK) != 0) {
    return Error{"--switchbox-probe: cannot run '" + options.probe_command[0] +
                 "': " + std::strerror(errno)};
  }
  auto state = std::make_shared<State>(io, std::move(options), std::move(done));
  state->StartAll();
  return std::unique_ptr<SwitchboxCheck>(new SwitchboxCheck([state] { state->Cancel(); }));
}

}  // namespace ftrun::launcher
