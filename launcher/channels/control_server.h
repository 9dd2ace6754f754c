// ControlServer: the agent end of the worker control channel (ftrun-control(7)). A Unix
// domain socket in a private directory (mode 0700), path in FTRUN_CONTROL_SOCKET; one JSON
// object per line, at most 64 KiB, each read into its typed message (schema:
// proto/ftrun/v1/control.proto). A connection is bound to a local rank by its first
// message ("hello"), checked against the kernel's view of the peer (SO_PEERCRED: the peer
// must be in that worker's process group). Workers that never connect are unaffected.
// Limits, so that no local process can stall or exhaust the agent: a line nested deeper than
// kMaxJsonDepth is refused unparsed (json_line.h); a connection must say "hello" within
// kControlHelloTimeout; at most kMaxUnboundControlConnections may wait for their "hello" (a
// new one beyond that closes the oldest).
//
// Thread: loop only. Errors: a malformed, oversized, out-of-order or unknown message closes
// that connection with a logged reason (and an "error" line to the peer); the agent goes on.
#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/json_message.h"
#include "common/result.h"
#include "launcher/channels/json_line.h"

namespace ftrun::v1 {
class ControlHello;
class ControlSnapshotBegin;
class ControlSnapshotCommit;
class ControlSnapshotSteps;
class ControlSnapshotGet;
class ControlSnapshotMailbox;
}  // namespace ftrun::v1

namespace ftrun::launcher {

inline constexpr int kControlProtocolVersion = 1;
inline constexpr size_t kMaxControlLine = 64 * 1024;
inline constexpr size_t kMaxUnboundControlConnections = 64;
inline constexpr std::chrono::seconds kControlHelloTimeout{10};

// What the agent knows about one local rank of the current attempt.
struct RankControl {
  bool connected = false;
  bool has_handler = false;
  std::string group;
  int64_t step = -1;      // last step reported
  bool updating = false;  // between update begin and end
  bool progress_seen = false;
  bool finished = false;  // its training loop is over: silence is not a hang
  std::chrono::steady_clock::time_point last_progress;
  bool peer_failed = false;  // its collective failed; it waits for orders
};

class ControlServer {
 public:
  struct Events {
    std::function<void(int local_rank, uint64_t id, bool finalize, bool ok,
                       const std::string& error)>
        on_saved;
    std::function<void(int local_rank, const std::string& error)> on_peer_failed;
    // Every progress report, after the rank's state is updated (null: none).
    std::function<void(int local_rank, int64_t step, bool updating)> on_progress;
    // Flash checkpoint requests (null: the agent offers no memory snapshots and answers
    // them with "snapshot_refused"). The request is valid only during the call.
    std::function<void(int local_rank, const v1::ControlSnapshotBegin&)> on_snapshot_begin;
    std::function<void(int local_rank, const v1::ControlSnapshotCommit&)> on_snapshot_commit;
    std::function<void(int local_rank, const v1::ControlSnapshotSteps&)> on_snapshot_steps;
    std::function<void(int local_rank, const v1::ControlSnapshotGet&)> on_snapshot_get;
    std::function<void(int local_rank, const v1::ControlSnapshotMailbox&)> on_snapshot_mailbox;
  };

  ControlServer(boost::asio::io_context& io, Events events);
  ~ControlServer();
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // Removes the stale control directories of dead agents under `tmp_root`
  // (stale_control_dirs.h), creates its own private directory there and starts listening.
  Status Start(const std::string& tmp_root);
  const std::string& path() const { return path_; }
  // Closes every connection, removes the socket and its directory.
  void Stop();

  // A new attempt: the workers' pids (= process groups) by local rank. Forgets every rank's
  // state and drops the previous attempt's connections.
  void SetWorkers(const std::vector<pid_t>& pids, int base_rank, int attempt);
  const RankControl& rank(int local_rank) const;
  int rank_count() const { return static_cast<int>(ranks_.size()); }
  // Sends one message (a JSON object without the newline); false if the rank is not connected.
  // With `fd` >= 0 the descriptor goes along (SCM_RIGHTS, on the message's first byte): it is
  // duplicated at once, so the caller keeps its own.
  bool Send(int local_rank, const std::string& json, int fd = -1);
  // The process of `local_rank` has exited: handles every complete line it sent before it
  // died (still in the socket: a commit sent just before a SIGKILL is not lost), then closes
  // its connections. Reads without blocking, at most the socket's buffered bytes.
  void Drain(int local_rank);
  // Tests only: a shorter wait for "hello" than kControlHelloTimeout.
  void TEST_SetHelloTimeout(std::chrono::milliseconds t) { hello_timeout_ = t; }

 private:
  struct Connection;
  void Accept();
  void Read(std::shared_ptr<Connection> c);
  void Write(std::shared_ptr<Connection> c);
  // Sends the front message's first bytes with its descriptor; then Write goes on.
  void WriteWithFd(std::shared_ptr<Connection> c);
  // A line from `c`: read once, bound by its "hello", then HandleBound; "" or why it closes c.
  std::string Handle(Connection& c, const std::string& line);
  // The message of bound rank `lr` (control_messages.cc); "" or why its connection closes.
  std::string HandleBound(int lr, const std::string& type, const JsonLine& line);
  std::string HandleSnapshot(int lr, const std::string& type, const JsonLine& line);
  // Binds `c` to the local rank its "hello" claims, once the kernel agrees; "" or why not.
  std::string Bind(Connection& c, const v1::ControlHello& hello);
  void Close(const std::shared_ptr<Connection>& c, const std::string& why);
  int RankOfPeer(pid_t pid) const;
  // Makes room for one more connection without a "hello" (closes the oldest one beyond the
  // cap) and closes `c` if it says nothing for kControlHelloTimeout.
  void LimitUnbound(const std::shared_ptr<Connection>& c);

  boost::asio::io_context& io_;
  Events events_;
  std::string dir_;
  std::string path_;
  std::unique_ptr<boost::asio::local::stream_protocol::acceptor> acceptor_;
  std::vector<pid_t> pids_;
  int base_rank_ = 0;
  int attempt_ = 0;
  std::vector<RankControl> ranks_;
  std::map<int, std::shared_ptr<Connection>> by_rank_;
  std::vector<std::shared_ptr<Connection>> connections_;  // in order of arrival
  std::chrono::milliseconds hello_timeout_ = kControlHelloTimeout;
  size_t unbound_closed_ = 0;  // connections closed before their "hello" (logs are throttled)
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace ftrun::launcher
