#include "launcher/workers/orphan_reaper.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <sstream>

#include "common/log.h"
#include "launcher/workers/worker_process.h"

namespace ftrun::launcher {
namespace {

constexpr std::chrono::milliseconds kPoll{20};

// The text of a small /proc file; "" when it cannot be read. Plain read(2), not a stream: a
// process that exits between open and read makes read fail with ESRCH, which libstdc++'s
// filebuf would throw through an istreambuf_iterator and take the agent down.
std::string ReadProcFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string text;
  char buf[1024];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return text;
}

// Every process's parent, from /proc/<pid>/stat (field 4, after the command's closing paren).
std::multimap<pid_t, pid_t> ChildrenByParent() {
  std::multimap<pid_t, pid_t> children;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return children;
  while (dirent* e = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    const std::string text = ReadProcFile("/proc/" + std::string(e->d_name) + "/stat");
    const size_t paren = text.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream rest(text.substr(paren + 1));
    char state = 0;
    pid_t ppid = 0;
    if (rest >> state >> ppid) children.emplace(ppid, static_cast<pid_t>(pid));
  }
  ::closedir(proc);
  return children;
}

bool IsSubreaper() {
  int on = 0;
  return ::prctl(PR_GET_CHILD_SUBREAPER, &on) == 0 && on != 0;
}

// This process's children that it did not start.
std::vector<pid_t> Adopted(const std::multimap<pid_t, pid_t>& children) {
  std::vector<pid_t> out;
  auto [from, to] = children.equal_range(::getpid());
  for (auto it = from; it != to; ++it) {
    if (!IsStartedChild(it->second)) out.push_back(it->second);
  }
  return out;
}

// `roots` and all their descendants, parents before their children.
std::vector<pid_t> Descendants(const std::multimap<pid_t, pid_t>& children,
                               const std::vector<pid_t>& roots) {
  std::vector<pid_t> out(roots);
  for (size_t i = 0; i < out.size(); ++i) {
    auto [from, to] = children.equal_range(out[i]);
    for (auto it = from; it != to; ++it) out.push_back(it->second);
  }
  return out;
}

}  // namespace

struct OrphanReaper::Sweep {
  explicit Sweep(boost::asio::io_context& io) : timer(io) {}
  boost::asio::steady_timer timer;
  std::chrono::steady_clock::time_point deadline;
  std::set<pid_t> killed;
  std::function<void(size_t)> done;
};

OrphanReaper::~OrphanReaper() { *alive_ = false; }

Status OrphanReaper::BecomeSubreaper() {
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    return Error{std::string("prctl(PR_SET_CHILD_SUBREAPER): ") + std::strerror(errno)};
  }
  return {};
}

void OrphanReaper::KillAdopted(std::function<void(size_t)> done) {
  auto sweep = std::make_shared<Sweep>(io_);
  sweep->done = std::move(done);
  sweep->deadline = std::chrono::steady_clock::now() + kReapLimit;
  if (!IsSubreaper()) {
    boost::asio::post(io_, [sweep] { sweep->done(0); });
    return;
  }
  std::weak_ptr<bool> alive = alive_;
  boost::asio::post(io_, [this, alive, sweep] {
    if (auto a = alive.lock(); a && *a) Continue(sweep);
  });
}

// One pass: reap the adopted processes that died, kill what is adopted and still runs (with its
// descendants); done once nothing is adopted any more, or at the deadline.
void OrphanReaper::Continue(std::shared_ptr<Sweep> sweep) {
  const auto children = ChildrenByParent();
  std::vector<pid_t> adopted = Adopted(children);
  std::vector<pid_t> left;
  for (pid_t pid : adopted) {
    if (::waitpid(pid, nullptr, WNOHANG) != pid) left.push_back(pid);
  }
  for (pid_t pid : Descendants(children, left)) {
    if (sweep->killed.insert(pid).second) ::kill(pid, SIGKILL);
  }
  if (left.empty() || std::chrono::steady_clock::now() >= sweep->deadline) {
    if (!left.empty()) {
      WorkerLog()->warn("adopted processes still alive {} ms after SIGKILL: count={}",
                        kReapLimit.count(), left.size());
    } else if (!sweep->killed.empty()) {
      WorkerLog()->warn(
          "killed {} process(es) that left their worker's process group and outlived it",
          sweep->killed.size());
    }
    sweep->done(sweep->killed.size());
    return;
  }
  std::weak_ptr<bool> alive = alive_;
  sweep->timer.expires_after(kPoll);
  sweep->timer.async_wait([this, alive, sweep](const boost::system::error_code& ec) {
    auto a = alive.lock();
    if (!ec && a && *a) Continue(sweep);
  });
}

}  // namespace ftrun::launcher
