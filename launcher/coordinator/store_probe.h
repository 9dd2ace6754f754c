// StoreProbe: partition detection for a node that is not group rank 0. While this node's
// workers run a round, it checks every `interval` that group rank 0's store (the round's
// MASTER_ADDR:MASTER_PORT, which every worker must reach to start and to rejoin) accepts a TCP
// connection within `timeout` (in a round of more than 128 nodes, every nodes/128 intervals,
// so that group rank 0's store sees at most about 128 checks a second). After `failures` failed
// checks in a row it calls `unreachable` once for that round, with the last error
// ("localhost:29500: Connection refused").
//
// Only meaningful when the store is the agent's (it listens for the whole job); with worker
// rank 0 hosting it the store is not up until the workers are, so the owner does not probe.
//
// Thread: loop only, fully asynchronous (resolve, connect, timers on the caller's
// io_context). Ownership: destroying the probe or calling Stop() cancels what is in flight;
// the callback never runs after that.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace ftrun::launcher {

struct StoreProbeOptions {
  std::chrono::milliseconds interval{1000};
  std::chrono::milliseconds timeout{2000};
  int failures = 3;
};

class StoreProbe {
 public:
  using Unreachable = std::function<void(uint64_t round, const std::string& error)>;

  StoreProbe(boost::asio::io_context& io, StoreProbeOptions options, Unreachable unreachable);
  ~StoreProbe();

  // Checks host:port for `round`, a round of `nodes` nodes (a new round starts again from no
  // failures; the same round again changes nothing).
  void Watch(uint64_t round, const std::string& host, int port, int nodes = 1);
  void Stop();
  // Checks completed so far (for tests).
  int checks() const { return checks_; }

 private:
  void Check();
  void Done(const std::string& error);  // "" : reached

  boost::asio::io_context& io_;
  StoreProbeOptions opts_;
  Unreachable unreachable_;
  boost::asio::steady_timer timer_;
  std::optional<uint64_t> round_;
  std::string host_;
  int port_ = 0;
  std::chrono::milliseconds interval_{1000};
  int failed_ = 0;
  int checks_ = 0;
  bool reported_ = false;
  // One check in flight; its objects are shared with the handlers, the generation tells a
  // stale handler (of a stopped or replaced check) from the current one.
  struct Attempt;
  std::shared_ptr<Attempt> attempt_;
  uint64_t generation_ = 0;
};

}  // namespace ftrun::launcher
