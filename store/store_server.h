// The agent's c10d store: a TCP server speaking torch 1.13's TCPStore protocol (wire.h) over
// one KvStore, on the agent's loop. Workers started with TORCHELASTIC_USE_AGENT_STORE=True
// connect to it at MASTER_ADDR:MASTER_PORT (torch's env:// and tcp:// init methods) instead of
// worker rank 0 hosting a store they must wait for.
//
// The store is reachable from the network and, like torch's, has no authentication; every
// input is bounded instead (StoreServerOptions, KvLimits): key, value and request sizes, bytes
// and keys held, keys named by pending waits and watches, connections (in all and per peer
// address), input buffered by all connections together, answers a client leaves unread, a request
// that stays incomplete. A connection that passes a bound, sends a malformed or unknown request, or
// makes a handler fail is closed with one log line (at most `max_log_lines_per_second` such lines;
// the rest are counted); the server and the other connections go on. An idle connection is
// legitimate (torch's clients hold theirs for the whole job) and is kept.
//
// Thread: loop only; nothing blocks the loop (a WAIT is a registration answered when its keys
// are set). Ownership: the caller owns the server; Stop() or destruction closes the listener
// and every connection.
#pragma once

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/result.h"
#include "store/kv_store.h"

namespace ftrun::store {

struct StoreServerOptions {
  std::string address;  // an IP literal; "" = every address (IPv6 and IPv4 when possible)
  uint16_t port = 0;    // 0 = an ephemeral port
  KvLimits limits;
  size_t max_connections = 16384;          // torch's client holds 2 per rank (queries, callbacks)
  size_t max_connections_per_peer = 4096;  // from one address (a node's ranks share one)
  size_t max_buffered_bytes = 512 * 1024 * 1024;  // input of all incomplete requests together
  size_t max_unread_bytes = 64 * 1024 * 1024;     // answers queued to one connection
  std::chrono::milliseconds request_timeout{std::chrono::seconds(60)};  // first byte -> whole
  std::chrono::milliseconds write_timeout{std::chrono::seconds(60)};    // queued answers unsent
  int max_log_lines_per_second = 10;
  // How long a poll of torch's store-based barrier is held at most (SetWorldSize): a multiple
  // of the poller's 10 ms interval, so that holding never makes it see the count later than its
  // own polling would; short beside any store timeout (torch's default: 30 min).
  std::chrono::milliseconds barrier_hold{500};
};

class StoreServer {
 public:
  // Binds and listens. Errors name the address and port ("agent store: cannot listen on
  // 0.0.0.0:29500: Address already in use").
  static Result<std::unique_ptr<StoreServer>> Listen(boost::asio::io_context& io,
                                                     StoreServerOptions options);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  uint16_t port() const;
  // Closes the listener and every connection. Idempotent.
  void Stop();
  // The workers' world size (0: unknown). With it, a poll of torch's store-based barrier
  // (ADD 0 to ".../store_based_barrier_key:<n>", every 10 ms until it reads the world size) is
  // answered as soon as the count reaches it, or after `barrier_hold`: never later than
  // torch's own server would have let the poller see it.
  void SetWorldSize(int64_t world_size);
  // Removes every key starting with `prefix` (e.g. the keys of finished attempts); returns how
  // many.
  size_t DropPrefix(std::string_view prefix);

  // For tests, metrics and the log.
  size_t keys() const;
  size_t bytes() const;
  size_t connections() const;
  uint64_t rejected() const;  // connections closed for a bad request or a bound

 private:
  struct Impl;
  explicit StoreServer(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;  // shared with its pending operations
};

}  // namespace ftrun::store
