// NameResolver: looks up a probe's peer without the loop's io_context.
//
// Asio's resolver runs getaddrinfo on a thread of the io_context it belongs to, and a fork
// through Boost.Process calls notify_fork on that io_context, which stops the thread: a
// lookup queued just before the fork never completes (the probe would hang until its timeout
// and keep the loop alive). Every lookup here runs on a thread and io_context of its own,
// which nothing forks through, so probes and check commands may start in any order.
// An IP literal needs no lookup: its endpoint comes back without a thread.
//
// Thread: Resolve and Cancel on the loop; the handler runs on the loop, once, never inside
// Resolve, unless cancelled first. Ownership: the caller owns it and the loop outlives it;
// destroying it cancels. A lookup in progress (getaddrinfo cannot be interrupted) finishes
// on its own detached thread, which then drops the result: nothing waits for it.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ftrun::launcher {

class NameResolver {
 public:
  using Endpoints = std::vector<boost::asio::ip::tcp::endpoint>;
  using Handler = std::function<void(const boost::system::error_code&, Endpoints)>;

  explicit NameResolver(boost::asio::io_context& loop) : loop_(loop) {}
  ~NameResolver() { Cancel(); }
  NameResolver(const NameResolver&) = delete;
  NameResolver& operator=(const NameResolver&) = delete;

  // Looks up host:port (a name or an IP literal); cancels a lookup still pending.
  void Resolve(const std::string& host, uint16_t port, Handler done);
  // The pending lookup's handler will not run. Idempotent.
  void Cancel();

 private:
  struct Lookup;
  boost::asio::io_context& loop_;
  std::shared_ptr<Lookup> pending_;
};

}  // namespace ftrun::launcher
