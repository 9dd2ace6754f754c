#include "common/event_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>

#include "common/log.h"

namespace ftrun {
namespace {

std::string UtcNow() {
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()) % 1000;
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  return fmt::format("{}.{:03d}Z", buf, ms.count());
}

}  // namespace

Result<std::shared_ptr<EventLog>> EventLog::Open(const std::string& path, std::string run_id,
                                                 std::string node) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return Error{"--event-log: cannot open " + path + ": " + std::strerror(errno)};
  auto log = std::make_shared<EventLog>();
  log->fd_ = fd;
  log->run_id_ = std::move(run_id);
  log->node_ = std::move(node);
  return log;
}

EventLog::~EventLog() {
  if (fd_ >= 0) ::close(fd_);
}

void EventLog::Write(JsonMessage record, std::optional<uint64_t> round) {
  if (fd_ < 0) return;
  record.Set("schema", kEventLogSchema)
      .Set("time", UtcNow())
      .Set("node", node_)
      .Set("run_id", run_id_);
  if (round) record.Set("round", *round);
  std::string line = record.str() + "\n";
  if (::write(fd_, line.data(), line.size()) != static_cast<ssize_t>(line.size()) &&
      !reported_error_) {
    reported_error_ = true;
    LauncherLog()->warn("cannot write the event log: {}", std::strerror(errno));
  }
}

}  // namespace ftrun
