// Pair probe: the TCP measurement between two agents for --network-check. One agent runs a
// ProbeServer (the pair's listener, "a"), the other a ProbeClient ("b"); the client measures
// round-trip latency (median of a few ping-pongs), then bandwidth client -> server (upload)
// and server -> client (download). Bandwidth is in MB/s with MB = 1e6 bytes; each transfer
// is timed on the client from its first byte sent to the last byte or acknowledgement
// received, so it includes one round trip.
//
// Wire format, version 2. Every message is a 16-byte header, then `length` payload bytes:
//   magic    4 bytes  "FTNP"
//   version  1 byte   2
//   type     1 byte   1 PING, 2 PONG, 3 DATA, 4 DATA_DONE, 5 PULL, 6 ERROR, 7 KEY
//   reserved 2 bytes  0
//   length   8 bytes  payload length, big-endian
// The client speaks first and the server only answers. The first message is KEY, whose
// payload (16..256 bytes) is the check's probe key (CheckOrder.probe_key, given by the
// rendezvous to the check's members only); the server reads it within handshake_timeout and
// compares it in constant time with the key it was given (SetKey). Until it matches, nothing
// else is read: a connection whose first message is not a KEY of the right length is closed
// at once, one whose key does not match when its deadline passes (a key set meanwhile, say
// the listener's order arriving after the client's, is still compared), each with ERROR and a
// fixed reason. Then:
//   PING (payload <= 64 bytes)          -> PONG with the same payload
//   DATA (N bytes of anything)          -> DATA_DONE (empty) once all N bytes have arrived
//   PULL (payload: N, 8 bytes, big-end.) -> DATA (N bytes)
// N is at most the server's max_bytes. A malformed header (bad magic, version or type, a
// length out of range, a reply the client did not ask for) ends the connection; the server
// first sends ERROR with a one-line UTF-8 reason (<= 1024 bytes), which the client reports.
// A client closes the connection when it is done.
//
// Thread: loop only; both classes run fully asynchronously on the caller's io_context and
// never block it. Ownership: the caller owns each object; destroying it cancels what is in
// flight (a client's handler is then never called; a server closes its live connections).
// Errors name the peer ("netcheck probe to 10.0.0.2:29401: ...").
#pragma once

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/result.h"
#include "common/running_operation.h"
#include "rendezvous/credentials.h"

namespace ftrun::launcher {

inline constexpr uint8_t kProbeVersion = 2;
inline constexpr size_t kProbeHeaderSize = 16;
// A probe key's accepted length: the rendezvous' secrets (NewSecret makes 32 bytes).
inline constexpr size_t kMinProbeKey = rendezvous::kMinSecretBytes;
inline constexpr size_t kMaxProbeKey = rendezvous::kMaxSecretBytes;

struct ProbeServerOptions {
  uint64_t max_bytes = uint64_t{1} << 30;  // largest DATA/PULL accepted
  // A connection is closed after this long, whatever it is doing.
  std::chrono::milliseconds connection_timeout{std::chrono::seconds(120)};
  // Connections served at once (a wave gives a node at most 64 pairs); more are closed at
  // once, unanswered, and counted in rejected().
  size_t max_connections = 128;
  // A connection must have shown the key by then, or it is closed.
  std::chrono::milliseconds handshake_timeout{std::chrono::seconds(5)};
};

class ProbeServer {
 public:
  // Listens on `address` (an IP literal; "" = every IPv4 interface), `port` 0 = ephemeral.
  // Errors name the address.
  static Result<std::unique_ptr<ProbeServer>> Listen(boost::asio::io_context& io,
                                                     const std::string& address, uint16_t port,
                                                     ProbeServerOptions options = {});
  ~ProbeServer();
  ProbeServer(const ProbeServer&) = delete;
  ProbeServer& operator=(const ProbeServer&) = delete;

  uint16_t port() const { return port_; }  // the bound port
  // The key a connection must show first (the current check's probe key). Until one is set,
  // or with one outside [kMinProbeKey, kMaxProbeKey], every connection is refused.
  void SetKey(std::string key);
  // Closes the listener and every live connection. Idempotent.
  void Stop();

  // For tests and the log: connections accepted, connections ended by a protocol error
  // (refused ones included), and connections refused for a missing or wrong key.
  uint64_t accepted() const;
  uint64_t rejected() const;
  uint64_t refused() const;

 private:
  struct Impl;
  explicit ProbeServer(std::shared_ptr<Impl> impl, uint16_t port)
      : impl_(std::move(impl)), port_(port) {}
  std::shared_ptr<Impl> impl_;  // shared with its pending accept
  uint16_t port_ = 0;
};

struct ProbeOptions {
  std::string key;                      // the check's probe key, sent first
  uint64_t bytes = uint64_t{64} << 20;  // each way (--network-check-bytes); 0: latency only
  int pings = 5;                        // round trips for the latency median (>= 1)
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};  // the whole probe
};

struct ProbeResult {
  double upload_mbps = 0;    // client -> server (b -> a)
  double download_mbps = 0;  // server -> client (a -> b)
  double rtt_ms = 0;         // median round trip
  uint64_t bytes = 0;        // moved each way
  double seconds = 0;        // the whole probe, connect included
};

class ProbeClient {
 public:
  using Handler = std::function<void(Result<ProbeResult>)>;

  // Connects to host:port (a name is resolved asynchronously) and runs the probe. `done`
  // runs exactly once on the loop, never inside Start, unless the client is destroyed first.
  static std::unique_ptr<ProbeClient> Start(boost::asio::io_context& io, const std::string& host,
                                            uint16_t port, ProbeOptions options, Handler done);

 private:
  struct Session;
  explicit ProbeClient(std::function<void()> abandon) : running_(std::move(abandon)) {}
  RunningOperation running_;  // destroying the client cancels the probe; `done` never runs
};

}  // namespace ftrun::launcher
