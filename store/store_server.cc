#include "store/store_server.h"

#include <fmt/format.h>

#include <array>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <deque>
#include <map>
#include <optional>
#include <set>

#include "common/log.h"
#include "store/barrier_poll.h"
#include "store/protocol.h"
#include "store/wire.h"

namespace ftrun::store {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using SteadyClock = std::chrono::steady_clock;

namespace {

// Largest request accepted: a COMPARE_SET with the largest key and two largest values, or a
// WAIT/CHECK whose keys add up to as much.
size_t MaxRequestBytes(const KvLimits& l) {
  return 1 + 3 * 8 + l.max_key_bytes + 2 * l.max_value_bytes;
}

}  // namespace

struct StoreServer::Impl : std::enable_shared_from_this<Impl> {
  struct Conn {
    ConnId id = 0;
    tcp::socket sock;
    std::string peer;
    std::string in;                                  // bytes of requests not yet complete
    std::optional<SteadyClock::time_point> partial;  // since when `in` holds a request start
    std::deque<std::string> out;                     // answers not yet written
    size_t out_bytes = 0;
    std::string writing;  // the write in flight
    std::optional<SteadyClock::time_point> write_since;
    bool closed = false;
    std::string address;  // the peer's, for max_connections_per_peer
    // A barrier poll held until the barrier is complete (or opts.barrier_hold): its connection's
    // later requests wait behind it, as torch's client sends none meanwhile.
    std::optional<Request> held;
    std::unique_ptr<asio::steady_timer> hold_timer;
    explicit Conn(tcp::socket s) : sock(std::move(s)) {}
  };

  Impl(asio::io_context& io, StoreServerOptions o)
      : io(io), opts(std::move(o)), acceptor(io), sweep(io), retry(io), kv(opts.limits) {}

  asio::io_context& io;
  StoreServerOptions opts;
  tcp::acceptor acceptor;
  asio::steady_timer sweep;
  asio::steady_timer retry;
  KvStore kv;
  std::map<ConnId, std::shared_ptr<Conn>> conns;
  std::map<std::string, size_t> conns_per_peer;  // by address
  ConnId next_id = 1;
  size_t buffered = 0;  // sum of every connection's in + out
  uint64_t rejected = 0;
  bool stopped = false;
  uint16_t port = 0;
  int64_t world_size = 0;                           // the workers' (0: unknown, hold nothing)
  std::map<std::string, std::set<ConnId>> holding;  // barrier key -> connections held on it
  // Log lines about peers, at most opts.max_log_lines_per_second; the rest are counted.
  int logged_this_second = 0;
  uint64_t unlogged = 0;
  std::array<char, 64 * 1024> scratch{};

  void Warn(const std::string& line) {
    if (logged_this_second++ < opts.max_log_lines_per_second) {
      LauncherLog()->warn("agent store: {}", line);
    } else {
      ++unlogged;
    }
  }

  void Accept() {
    acceptor.async_accept(
        [self = shared_from_this()](const boost::system::error_code& ec, tcp::socket sock) {
          if (self->stopped) return;
          if (ec) {
            // EMFILE and the like: try again shortly instead of spinning.
            self->Warn(fmt::format("accept failed: {}", ec.message()));
            self->retry.expires_after(std::chrono::milliseconds(100));
            self->retry.async_wait([self](const boost::system::error_code& e) {
              if (!e && !self->stopped) self->Accept();
            });
            return;
          }
          self->Admit(std::move(sock));
          self->Accept();
        });
  }

  void Admit(tcp::socket sock) {
    boost::system::error_code ec;
    auto ep = sock.remote_endpoint(ec);
    std::string address = ec ? "?" : ep.address().to_string();
    std::string peer = ec ? "?" : fmt::format("{}:{}", address, ep.port());
    if (conns.size() >= opts.max_connections) {
      ++rejected;
      Warn(fmt::format("refused a connection from {}: {} connections already (the bound)", peer,
                       conns.size()));
      sock.close(ec);
      return;
    }
    // One outsider's address cannot take every connection from the workers.
    if (size_t& mine = conns_per_peer[address]; mine >= opts.max_connections_per_peer) {
      ++rejected;
      Warn(fmt::format("refused a connection from {}: {} connections from {} already (the bound)",
                       peer, mine, address));
      sock.close(ec);
      return;
    }
    sock.set_option(tcp::no_delay(true), ec);
    sock.non_blocking(true, ec);
    auto c = std::make_shared<Conn>(std::move(sock));
    c->id = next_id++;
    c->peer = std::move(peer);
    ++conns_per_peer[address];
    c->address = std::move(address);
    conns.emplace(c->id, c);
    LauncherLog()->debug("agent store: connection {} from {}", c->id, c->peer);
    WaitReadable(c);
  }

  // Waits for input without holding a buffer: an idle connection costs no memory.
  void WaitReadable(const std::shared_ptr<Conn>& c) {
    c->sock.async_wait(tcp::socket::wait_read,
                       [self = shared_from_this(), c](const boost::system::error_code& ec) {
                         if (c->closed) return;
                         if (ec) return self->Close(*c, "");
                         self->OnReadable(c);
                       });
  }

  void OnReadable(const std::shared_ptr<Conn>& c) {
    for (;;) {
      boost::system::error_code ec;
      size_t n = c->sock.read_some(asio::buffer(scratch), ec);
      if (ec == asio::error::would_block) break;
      if (ec) return Close(*c, "");  // EOF or reset: the client is gone
      if (buffered + n > opts.max_buffered_bytes) {
        return Reject(*c, fmt::format("the store's input budget ({} bytes, all connections) is "
                                      "spent",
                                      opts.max_buffered_bytes));
      }
      if (c->in.empty()) c->partial = SteadyClock::now();
      c->in.append(scratch.data(), n);
      buffered += n;
      if (!Process(*c)) return;
      if (n < scratch.size()) break;
    }
    WaitReadable(c);
  }

  // Applies every whole request in c.in. False when the connection was closed.
  bool Process(Conn& c) {
    size_t off = 0;
    bool ok = true;
    while (ok && !c.held) {
      Parsed p = ParseRequest(std::string_view(c.in).substr(off), kv.limits());
      if (p.status == Parsed::kNeedMore) break;
      if (p.status == Parsed::kBad) {
        Reject(c, p.error);
        return false;
      }
      off += p.consumed;
      if (ShouldHold(p.request)) {
        Hold(c, std::move(p.request));
        break;
      }
      ok = Answer(c, p.request);
    }
    if (!ok) return false;
    if (off > 0) {
      c.in.erase(0, off);
      buffered -= off;
      c.partial = c.in.empty() ? std::nullopt : std::optional(SteadyClock::now());
      if (c.in.empty() && c.in.capacity() > scratch.size()) std::string().swap(c.in);
    }
    if (c.in.size() > MaxRequestBytes(kv.limits())) {
      Reject(c, fmt::format("a request of more than {} bytes", MaxRequestBytes(kv.limits())));
      return false;
    }
    return true;
  }

  // Applies one request and sends what it owes. False when the connection was closed.
  bool Answer(Conn& c, const Request& r) {
    std::vector<Outgoing> out;
    auto s = Apply(kv, c.id, r, out);
    if (!s) {
      Reject(c, fmt::format("{}: {}", QueryName(static_cast<uint8_t>(r.type)), s.error().message));
      return false;
    }
    for (auto& o : out) Send(o.conn, std::move(o.bytes));
    if (r.type == Query::kAdd && r.delta != 0 && holding.count(r.keys[0])) {
      ReleaseIfComplete(r.keys[0]);
    }
    return !c.closed;
  }

  // A barrier poll that would read fewer ranks than the world size is answered when the last
  // rank arrives instead of at the next poll, up to 10 ms later (torch >= 2.1 waits on a key
  // instead of polling).
  bool ShouldHold(const Request& r) const { return ShouldHoldBarrierPoll(kv, r, world_size); }

  void Hold(Conn& c, Request r) {
    holding[r.keys[0]].insert(c.id);
    c.held = std::move(r);
    if (!c.hold_timer) c.hold_timer = std::make_unique<asio::steady_timer>(io);
    c.hold_timer->expires_after(opts.barrier_hold);
    c.hold_timer->async_wait(
        [self = shared_from_this(), id = c.id](const boost::system::error_code& ec) {
          if (!ec) self->Release(id);
        });
  }

  void ReleaseIfComplete(const std::string& key) {
    if (!BarrierComplete(kv, key, world_size)) return;
    const std::set<ConnId> ids = holding[key];
    for (ConnId id : ids) Release(id);
  }

  // Answers the held poll with the count now, then goes on with what the connection sent
  // meanwhile.
  void Release(ConnId id) {
    auto it = conns.find(id);
    if (it == conns.end() || !it->second->held) return;
    auto c = it->second;
    Request r = std::move(*c->held);
    c->held.reset();
    c->hold_timer->cancel();
    Unhold(id, r.keys[0]);
    if (Answer(*c, r) && !c->in.empty()) Process(*c);
  }

  void Unhold(ConnId id, const std::string& key) {
    auto h = holding.find(key);
    if (h == holding.end()) return;
    h->second.erase(id);
    if (h->second.empty()) holding.erase(h);
  }

  void Send(ConnId id, std::string bytes) {
    auto it = conns.find(id);
    if (it == conns.end() || bytes.empty()) return;
    Conn& c = *it->second;
    if (c.out_bytes + bytes.size() > opts.max_unread_bytes) {
      return Reject(
          c, fmt::format("more than {} bytes of answers left unread", opts.max_unread_bytes));
    }
    if (buffered + bytes.size() > opts.max_buffered_bytes) {
      return Reject(
          c, fmt::format("the store's buffer budget ({} bytes) is spent", opts.max_buffered_bytes));
    }
    c.out_bytes += bytes.size();
    buffered += bytes.size();
    c.out.push_back(std::move(bytes));
    if (c.writing.empty()) Write(it->second);
  }

  void Write(const std::shared_ptr<Conn>& c) {
    for (auto& b : c->out) c->writing += b;  // one write for what queued up meanwhile
    c->out.clear();
    c->write_since = SteadyClock::now();
    asio::async_write(c->sock, asio::buffer(c->writing),
                      [self = shared_from_this(), c](const boost::system::error_code& ec, size_t) {
                        if (c->closed) return;
                        if (ec) return self->Close(*c, "");
                        self->buffered -= c->writing.size();
                        c->out_bytes -= c->writing.size();
                        c->writing.clear();
                        c->write_since.reset();
                        if (!c->out.empty()) self->Write(c);
                      });
  }

  void Reject(Conn& c, const std::string& why) {
    ++rejected;
    Close(c, why);
  }

  void Close(Conn& c, const std::string& why) {
    if (c.closed) return;
    if (!why.empty()) Warn(fmt::format("closed the connection from {}: {}", c.peer, why));
    c.closed = true;
    if (c.held) {
      Unhold(c.id, c.held->keys[0]);
      c.held.reset();
      c.hold_timer->cancel();
    }
    boost::system::error_code ec;
    c.sock.close(ec);
    buffered -= c.in.size() + c.out_bytes;
    kv.Disconnect(c.id);
    if (auto n = conns_per_peer.find(c.address); n != conns_per_peer.end() && --n->second == 0) {
      conns_per_peer.erase(n);
    }
    conns.erase(c.id);  // pending handlers hold the last reference
  }

  void Sweep() {
    sweep.expires_after(std::chrono::seconds(1));
    sweep.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (ec || self->stopped) return;
      if (self->unlogged > 0) {
        LauncherLog()->warn("agent store: {} more such lines not logged", self->unlogged);
        self->unlogged = 0;
      }
      self->logged_this_second = 0;
      const auto now = SteadyClock::now();
      std::vector<std::shared_ptr<Conn>> late;
      for (auto& [id, c] : self->conns) {
        if ((c->partial && now - *c->partial > self->opts.request_timeout) ||
            (c->write_since && now - *c->write_since > self->opts.write_timeout)) {
          late.push_back(c);
        }
      }
      for (auto& c : late) {
        self->Reject(*c, c->partial ? fmt::format("a request incomplete for more than {} ms",
                                                  self->opts.request_timeout.count())
                                    : fmt::format("its answers unread for more than {} ms",
                                                  self->opts.write_timeout.count()));
      }
      self->Sweep();
    });
  }

  void Stop() {
    if (stopped) return;
    stopped = true;
    boost::system::error_code ec;
    acceptor.close(ec);
    sweep.cancel();
    retry.cancel();
    std::vector<std::shared_ptr<Conn>> all;
    for (auto& [id, c] : conns) all.push_back(c);
    for (auto& c : all) Close(*c, "");
  }
};

Result<std::unique_ptr<StoreServer>> StoreServer::Listen(asio::io_context& io,
                                                         StoreServerOptions options) {
  auto impl = std::make_shared<Impl>(io, std::move(options));
  const std::string addr = impl->opts.address;
  const uint16_t port = impl->opts.port;
  auto where = [&](const std::string& a) {
    return fmt::format("agent store: cannot listen on {}:{}",
                       a.find(':') != std::string::npos ? "[" + a + "]" : a, port);
  };
  auto try_listen = [&](const tcp::endpoint& ep, bool dual) -> boost::system::error_code {
    boost::system::error_code ec;
    impl->acceptor = tcp::acceptor(io);
    if (impl->acceptor.open(ep.protocol(), ec)) return ec;
    impl->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
    if (dual) impl->acceptor.set_option(asio::ip::v6_only(false), ec);
    if (impl->acceptor.bind(ep, ec)) return ec;
    impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
    return ec;
  };
  boost::system::error_code ec;
  if (addr.empty()) {
    ec = try_listen(tcp::endpoint(asio::ip::address_v6::any(), port), true);
    if (ec && ec != asio::error::address_in_use) {
      ec = try_listen(tcp::endpoint(asio::ip::address_v4::any(), port), false);
    }
    if (ec) return Error{where("0.0.0.0") + ": " + ec.message()};
  } else {
    auto ip = asio::ip::make_address(addr, ec);
    if (ec) return Error{where(addr) + ": not an IP address"};
    ec = try_listen(tcp::endpoint(ip, port), false);
    if (ec) return Error{where(addr) + ": " + ec.message()};
  }
  impl->port = impl->acceptor.local_endpoint(ec).port();
  impl->Accept();
  impl->Sweep();
  return std::unique_ptr<StoreServer>(new StoreServer(impl));
}

StoreServer::~StoreServer() { Stop(); }
uint16_t StoreServer::port() const { return impl_->port; }
void StoreServer::Stop() { impl_->Stop(); }
void StoreServer::SetWorldSize(int64_t world_size) { impl_->world_size = world_size; }
size_t StoreServer::DropPrefix(std::string_view prefix) { return impl_->kv.DropPrefix(prefix); }
size_t StoreServer::keys() const { return impl_->kv.size(); }
size_t StoreServer::bytes() const { return impl_->kv.bytes(); }
size_t StoreServer::connections() const { return impl_->conns.size(); }
uint64_t StoreServer::rejected() const { return impl_->rejected; }

}  // namespace ftrun::store
