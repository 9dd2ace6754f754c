// FileTimerServer: the agent side of torch.distributed.elastic.timer's FileTimerClient
// (torchrun's watchdog, enabled by TORCHELASTIC_ENABLE_FILE_TIMER=1). Workers write one JSON
// line per request into a FIFO: {"version":1,"pid":P,"scope_id":S,"expiration_time":T,
// "signal":N}; T < 0 releases the timer. When a timer expires its worker gets the signal and
// all of that worker's timers are cleared, as torch's FileTimerServer does, but on expiry
// rather than on a 0.1 s poll, and only for processes in this agent's worker process groups.
//
// Thread: loop only. Ownership: creates and removes the FIFO. Malformed requests are logged
// and ignored.
#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"

namespace ftrun::launcher {

class FileTimerServer {
 public:
  // `is_worker(pid)` says whether pid belongs to one of this agent's workers.
  FileTimerServer(boost::asio::io_context& io, std::string path,
                  std::function<bool(pid_t)> is_worker);
  ~FileTimerServer();
  FileTimerServer(const FileTimerServer&) = delete;
  FileTimerServer& operator=(const FileTimerServer&) = delete;

  // Creates the FIFO (replacing any file at the path) and starts reading requests.
  Status Start();
  // Stops reading and removes the FIFO.
  void Stop();

  // Applies one request line; exposed for tests. Returns false when malformed.
  bool HandleLine(const std::string& line);
  size_t timer_count() const { return timers_.size(); }

 private:
  struct Timer {
    double expiration = 0;  // seconds since the epoch
    int signal = 0;
  };
  void ReadMore();
  void Rearm();
  void FireExpired();

  boost::asio::io_context& io_;
  std::string path_;
  std::function<bool(pid_t)> is_worker_;
  boost::asio::posix::stream_descriptor fifo_;
  int keepalive_writer_ = -1;  // keeps reads from seeing EOF between clients
  boost::asio::steady_timer timer_;
  std::map<std::pair<pid_t, std::string>, Timer> timers_;
  std::string partial_;
  std::vector<char> buf_ = std::vector<char>(4096);
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace ftrun::launcher
