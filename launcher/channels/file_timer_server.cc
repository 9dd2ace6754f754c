#include "launcher/channels/file_timer_server.h"

#include <fcntl.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/log.h"

namespace ftrun::launcher {
namespace {

double EpochNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

FileTimerServer::FileTimerServer(boost::asio::io_context& io, std::string path,
                                 std::function<bool(pid_t)> is_worker)
    : io_(io), path_(std::move(path)), is_worker_(std::move(is_worker)), fifo_(io), timer_(io) {}

FileTimerServer::~FileTimerServer() { Stop(); }

Status FileTimerServer::Start() {
  ::unlink(path_.c_str());
  if (::mkfifo(path_.c_str(), 0600) != 0) {
    return Error{"cannot create the watchdog FIFO " + path_ + ": " + std::strerror(errno)};
  }
  int rd = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (rd < 0) return Error{"cannot open " + path_ + ": " + std::strerror(errno)};
  keepalive_writer_ = ::open(path_.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  fifo_.assign(rd);
  LauncherLog()->info("watchdog FIFO ready path={}", path_);
  ReadMore();
  return {};
}

void FileTimerServer::Stop() {
  if (!*alive_) return;
  *alive_ = false;
  boost::system::error_code ec;
  timer_.cancel();
  fifo_.close(ec);
  if (keepalive_writer_ >= 0) ::close(keepalive_writer_);
  keepalive_writer_ = -1;
  ::unlink(path_.c_str());
}

void FileTimerServer::ReadMore() {
  std::weak_ptr<bool> alive = alive_;
  fifo_.async_read_some(boost::asio::buffer(buf_), [this, alive](auto ec, size_t n) {
    auto a = alive.lock();
    if (!a || !*a || ec) return;
    partial_.append(buf_.data(), n);
    for (size_t nl; (nl = partial_.find('\n')) != std::string::npos;) {
      std::string line = partial_.substr(0, nl);
      partial_.erase(0, nl + 1);
      if (!HandleLine(line)) {
        LauncherLog()->warn("watchdog: ignoring malformed request: {:.200}", line);
      }
    }
    if (partial_.size() > 64 * 1024) partial_.clear();  // no newline in sight: garbage
    Rearm();
    ReadMore();
  });
}

bool FileTimerServer::HandleLine(const std::string& line) {
  namespace pb = google::protobuf;
  pb::Struct req;
  if (!pb::util::JsonStringToMessage(line, &req).ok()) return false;
  const auto& f = req.fields();
  auto number = [&](const char* k) -> std::optional<double> {
    auto it = f.find(k);
    if (it == f.end() || !it->second.has_number_value()) return std::nullopt;
    return it->second.number_value();
  };
  auto pid = number("pid");
  auto expiration = number("expiration_time");
  auto sig = number("signal");
  auto scope = f.find("scope_id");
  // pid and signal must be what they claim (found by fuzzing: a huge number overflowed the
  // conversion to int).
  if (!pid || !expiration || !sig || scope == f.end() || !scope->second.has_string_value() ||
      !(*pid >= 1 && *pid <= std::numeric_limits<pid_t>::max()) || std::isnan(*expiration) ||
      !(*sig >= 0 && *sig <= SIGRTMAX)) {
    return false;
  }
  auto key = std::make_pair(static_cast<pid_t>(*pid), scope->second.string_value());
  if (*expiration < 0) {
    timers_.erase(key);
  } else {
    timers_[key] = Timer{*expiration, static_cast<int>(*sig)};
  }
  return true;
}

void FileTimerServer::Rearm() {
  if (timers_.empty()) {
    timer_.cancel();
    return;
  }
  double earliest = timers_.begin()->second.expiration;
  for (const auto& [k, t] : timers_) earliest = std::min(earliest, t.expiration);
  double delay = std::max(0.0, earliest - EpochNow());
  timer_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(std::min(delay, 3600.0))));
  std::weak_ptr<bool> alive = alive_;
  timer_.async_wait([this, alive](const boost::system::error_code& ec) {
    auto a = alive.lock();
    if (!a || !*a || ec) return;
    FireExpired();
    Rearm();
  });
}

void FileTimerServer::FireExpired() {
  const double now = EpochNow();
  // pid -> its earliest expired timer that carries a signal (torch's choice).
  std::map<pid_t, std::pair<std::string, Timer>> expired;
  for (auto it = timers_.begin(); it != timers_.end();) {
    const auto& [key, t] = *it;
    if (t.expiration > now) {
      ++it;
      continue;
    }
    if (t.signal > 0) {
      auto e = expired.find(key.first);
      if (e == expired.end() || t.expiration < e->second.second.expiration) {
        expired[key.first] = {key.second, t};
      }
    }
    it = timers_.erase(it);  // an expired timer without a signal never acts again
  }
  auto log = LauncherLog();
  for (const auto& [pid, entry] : expired) {
    if (!is_worker_(pid)) {
      log->warn("watchdog: timer scope={} expired for pid={}, which is not a worker; ignored",
                entry.first, pid);
      continue;
    }
    log->warn("watchdog: timer scope={} expired; sending signal {} to worker pid={}", entry.first,
              entry.second.signal, pid);
    ::kill(pid, entry.second.signal);
    // torch clears every timer of a reaped worker.
    for (auto it = timers_.begin(); it != timers_.end();) {
      it = it->first.first == pid ? timers_.erase(it) : std::next(it);
    }
  }
}

}  // namespace ftrun::launcher
