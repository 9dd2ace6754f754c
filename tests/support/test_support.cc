#include "tests/support/test_support.h"

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "common/environment.h"
#include "launcher/workers/output_tee.h"
#include "launcher/workers/worker_process.h"

namespace ftrun::testing {

std::string FtrunBinary() { return FTRUN_TEST_BINARY; }
std::string FakeWorkerBinary() { return FTRUN_FAKE_WORKER; }
std::string SourceDir() { return FTRUN_SOURCE_DIR; }

std::vector<std::string> FakeWorkerJob(std::vector<std::string> head,
                                       const std::vector<std::string>& options,
                                       const std::vector<std::string>& actions) {
  head.insert(head.end(), options.begin(), options.end());
  head.push_back("--no-python");
  head.push_back(FakeWorkerBinary());
  head.insert(head.end(), actions.begin(), actions.end());
  return head;
}

long ProcStatusKb(pid_t pid, const std::string& key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string word; in >> word;) {
    if (word == key + ":") {
      long kb = 0;
      in >> kb;
      return kb;
    }
  }
  return 0;
}

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "ftrun_test_XXXXXX").string();
  path_ = ::mkdtemp(tmpl.data());
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

bool WaitFor(const std::function<bool()>& cond, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (cond()) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

namespace {
// True when `port` can be bound on every address of `protocol`; a machine without IPv6
// counts as free there.
bool Bindable(const boost::asio::ip::tcp& protocol, unsigned short port) {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor acceptor(io);
  boost::system::error_code ec;
  acceptor.open(protocol, ec);
  if (ec) return protocol == boost::asio::ip::tcp::v6();
  if (protocol == boost::asio::ip::tcp::v6())
    acceptor.set_option(boost::asio::ip::v6_only(true), ec);
  if (!ec) acceptor.bind({protocol, port}, ec);
  return !ec;
}
}  // namespace

int TestPort() {
  int ephemeral_low = 32768;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> ephemeral_low;
  const int low = 10000;
  const int high = std::max(low + 1000, ephemeral_low);
  static std::mt19937 random(std::random_device{}() ^ static_cast<unsigned>(getpid()));
  std::uniform_int_distribution<int> pick(low, high - 1);
  for (int attempt = 0; attempt < 200; ++attempt) {
    const auto port = static_cast<unsigned short>(pick(random));
    if (Bindable(boost::asio::ip::tcp::v4(), port) && Bindable(boost::asio::ip::tcp::v6(), port)) {
      return port;
    }
  }
  throw std::runtime_error("TestPort: no free port below the ephemeral range");
}

bool FileExists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

std::map<std::string, std::string> ParseEnvFile(const std::string& path) {
  std::map<std::string, std::string> env;
  for (const auto& line : Lines(ReadFile(path))) {
    size_t eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return env;
}

char ProcessState(pid_t pid) {
  std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return 0;
  return stat[close + 2];
}

bool ProcessAlive(pid_t pid) {
  char s = ProcessState(pid);
  return s != 0 && s != 'Z' && s != 'X';
}

std::vector<pid_t> ChildrenOf(pid_t pid) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    std::string name = entry.path().filename().string();
    if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) continue;
    std::string stat = ReadFile(entry.path().string() + "/stat");
    size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    char state = 0;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == pid) out.push_back(static_cast<pid_t>(std::atol(name.c_str())));
  }
  return out;
}

pid_t ReadPid(const std::string& path) {
  std::string text = ReadFile(path);
  return text.empty() ? 0 : static_cast<pid_t>(std::atol(text.c_str()));
}

struct ChildRun::Impl {
  boost::asio::io_context io;
  TempDir dir;
  std::unique_ptr<launcher::WorkerProcess> proc;
  std::optional<launcher::ExitStatus> status;
};

ChildRun::ChildRun(const std::string& program, const std::vector<std::string>& args,
                   const std::map<std::string, std::string>& extra_env,
                   const std::vector<std::string>& unset_env)
    : impl_(std::make_unique<Impl>()) {
  launcher::ProcessSpec spec;
  spec.program = program;
  spec.args = args;
  spec.env = CurrentEnvironment();
  for (const auto& k : unset_env) spec.env.erase(k);
  for (const auto& [k, v] : extra_env) spec.env[k] = v;
  int out = launcher::OpenLogFile(impl_->dir / "out");
  int err = launcher::OpenLogFile(impl_->dir / "err");
  spec.stdout_fd = out;
  spec.stderr_fd = err;
  auto p = launcher::WorkerProcess::Spawn(
      impl_->io, spec, [this](const launcher::ExitStatus& s) { impl_->status = s; });
  ::close(out);
  ::close(err);
  if (!p) throw std::runtime_error(p.error().message);
  impl_->proc = std::move(*p);
}

ChildRun::~ChildRun() {
  if (!impl_->status) Wait(std::chrono::milliseconds(0));
}

pid_t ChildRun::pid() const { return impl_->proc->pid(); }

void ChildRun::Signal(int sig) { ::kill(pid(), sig); }

std::string ChildRun::Err() const { return ReadFile(impl_->dir / "err"); }
std::string ChildRun::Out() const { return ReadFile(impl_->dir / "out"); }

RunResult ChildRun::Wait(std::chrono::milliseconds timeout) {
  RunResult r;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!impl_->status && std::chrono::steady_clock::now() < deadline) {
    impl_->io.run_one_for(std::chrono::milliseconds(20));
  }
  if (!impl_->status) {
    r.timed_out = true;
    impl_->proc->SignalGroup(SIGKILL);
    while (!impl_->status) impl_->io.run_one_for(std::chrono::milliseconds(20));
  }
  r.exit_code = impl_->status->ShellExitCode();
  r.signal = impl_->status->signal;
  r.out = Out();
  r.err = Err();
  return r;
}

RunResult RunFtrun(const std::vector<std::string>& args,
                   const std::map<std::string, std::string>& extra_env,
                   std::chrono::milliseconds timeout) {
  ChildRun run(FtrunBinary(), args, extra_env);
  return run.Wait(timeout);
}

bool MakeTestCertificates(const std::string& dir, bool other_ca) {
  std::string script =
      "set -e; cd '" + dir +
      "'; openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=test-ca "
      "  -keyout ca.key -out ca.pem 2>/dev/null; "
      "for who in server client; do "
      "  openssl req -newkey rsa:2048 -nodes -subj /CN=$who -keyout $who.key -out $who.csr "
      "    2>/dev/null; "
      "  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > $who.ext; "
      "  openssl x509 -req -in $who.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 "
      "    -extfile $who.ext -out $who.pem 2>/dev/null; "
      "done";
  if (other_ca) {
    script +=
        "; openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=other-ca "
        "  -keyout other.key -out other.pem 2>/dev/null";
  }
  std::ofstream(dir + "/make-certs.sh") << script;
  return std::system(("bash '" + dir + "/make-certs.sh'").c_str()) == 0;
}

}  // namespace ftrun::testing
