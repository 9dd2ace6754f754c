#include "launcher/netcheck/pair_probe.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <vector>

#include "common/log.h"
#include "launcher/netcheck/probe_wire.h"

namespace ftrun::launcher {

namespace asio = boost::asio;

namespace {

using namespace probe_wire;

// What the server shares with its sessions: the key they must see, and the counters.
struct ServerShared {
  ProbeServerOptions opts;
  std::string key;  // "" (or out of bounds): every connection is refused
  uint64_t rejected = 0;
  uint64_t refused = 0;
};

// One accepted connection. Owned by its pending handlers; the server keeps a weak reference.
class ServerSession : public std::enable_shared_from_this<ServerSession> {
 public:
  ServerSession(tcp::socket sock, std::shared_ptr<ServerShared> shared)
      : sock_(std::move(sock)),
        timer_(sock_.get_executor()),
        handshake_timer_(sock_.get_executor()),
        opts_(shared->opts),
        shared_(std::move(shared)) {
    boost::system::error_code ec;
    auto ep = sock_.remote_endpoint(ec);
    peer_ = ec ? "?" : fmt::format("{}:{}", ep.address().to_string(), ep.port());
  }

  void Start() {
    Arm(opts_.connection_timeout);
    auto self = shared_from_this();
    handshake_timer_.expires_after(opts_.handshake_timeout);
    handshake_timer_.async_wait([self](const boost::system::error_code& ec) {
      if (ec || self->authenticated_) return;
      // A client still sending its key has a read pending: it is closed without an answer.
      if (!self->waiting_for_key_) return self->Refuse("no probe key in time", false);
      self->Refuse("a wrong probe key", true);
    });
    ReadKey();
  }

  void Close() {
    boost::system::error_code ec;
    sock_.close(ec);
    timer_.cancel();
    handshake_timer_.cancel();
  }

  // The server's key changed: a key that arrived before it is compared again.
  void KeyChanged() {
    if (waiting_for_key_) TryKey();
  }

 private:
  // The handshake: a KEY header, then its bounded payload; nothing else is read before it.
  void ReadKey() {
    auto self = shared_from_this();
    asio::async_read(sock_, asio::buffer(hdr_),
                     [self](const boost::system::error_code& ec, size_t) {
                       if (ec) return self->Close();
                       auto n = ParseKeyHeader(self->hdr_);
                       if (!n) return self->Refuse(n.error().message, true);
                       self->key_.resize(*n);
                       asio::async_read(self->sock_, asio::buffer(self->key_),
                                        [self](const boost::system::error_code& ec, size_t) {
                                          if (ec) return self->Close();
                                          self->TryKey();
                                        });
                     });
  }

  void TryKey() {
    const std::string& want = shared_->key;
    const bool valid = want.size() >= kMinProbeKey && want.size() <= kMaxProbeKey;
    if (!valid || !rendezvous::SecretsEqual(key_, want)) {
      waiting_for_key_ = true;  // until the handshake's deadline
      return;
    }
    waiting_for_key_ = false;
    authenticated_ = true;
    handshake_timer_.cancel();
    ReadHeader();
  }

  // A connection without the key: one bounded log line (the first few, then every 100th),
  // naming the peer's address only, then (`answer`) ERROR with a fixed reason and hang up.
  void Refuse(const std::string& why, bool answer) {
    if (closing_) return;
    waiting_for_key_ = false;
    const uint64_t n = ++shared_->refused;
    if (n <= 10 || n % 100 == 0) {
      LauncherLog()->warn("netcheck probe from {}: refused ({}; {} refused so far)", peer_, why, n);
    }
    if (answer) return Hangup(why);
    closing_ = true;
    ++shared_->rejected;
    Close();
  }

  // (Re)starts the deadline after which the connection is closed, whatever it is doing.
  void Arm(std::chrono::milliseconds after) {
    auto self = shared_from_this();
    timer_.expires_after(after);
    timer_.async_wait([self, after](const boost::system::error_code& ec) {
      if (ec) return;  // cancelled or re-armed
      // A refused connection was logged once already (rate-limited): no second line for it.
      if (self->authenticated_) {
        LauncherLog()->warn("netcheck probe from {}: closed after {} ms", self->peer_,
                            after.count());
      }
      self->Close();
    });
  }

  void ReadHeader() {
    auto self = shared_from_this();
    asio::async_read(sock_, asio::buffer(hdr_),
                     [self](const boost::system::error_code& ec, size_t) {
                       if (ec) return self->Close();  // EOF: the client is done
                       self->OnHeader();
                     });
  }

  void OnHeader() {
    auto d = Decode(hdr_);
    if (!d) return Reject(d.error().message);
    auto self = shared_from_this();
    switch (d->type) {
      case kPing:
        if (d->length > kMaxPing) return Reject(fmt::format("PING of {} bytes", d->length));
        small_.resize(d->length);
        asio::async_read(sock_, asio::buffer(small_),
                         [self](const boost::system::error_code& ec, size_t) {
                           if (ec) return self->Close();
                           self->reply_ = Encode(kPong, self->small_.size());
                           std::array<asio::const_buffer, 2> out = {asio::buffer(self->reply_),
                                                                    asio::buffer(self->small_)};
                           asio::async_write(self->sock_, out,
                                             [self](const boost::system::error_code& ec, size_t) {
                                               if (ec) return self->Close();
                                               self->ReadHeader();
                                             });
                         });
        return;
      case kData:
        if (d->length > opts_.max_bytes) {
          return Reject(fmt::format("DATA of {} bytes (at most {})", d->length, opts_.max_bytes));
        }
        remaining_ = d->length;
        return Transfer(Direction::kRead);
      case kPull:
        if (d->length != 8) return Reject(fmt::format("PULL with a {}-byte payload", d->length));
        small_.resize(8);
        asio::async_read(
            sock_, asio::buffer(small_), [self](const boost::system::error_code& ec, size_t) {
              if (ec) return self->Close();
              uint64_t n = BigEndian64(self->small_.data());
              if (n > self->opts_.max_bytes) {
                return self->Reject(
                    fmt::format("PULL of {} bytes (at most {})", n, self->opts_.max_bytes));
              }
              self->remaining_ = n;
              self->reply_ = Encode(kData, n);
              asio::async_write(self->sock_, asio::buffer(self->reply_),
                                [self](const boost::system::error_code& ec, size_t) {
                                  if (ec) return self->Close();
                                  self->Transfer(Direction::kWrite);
                                });
            });
        return;
      default:
        return Reject(fmt::format("unexpected message type {}", d->type));
    }
  }

  // A DATA's payload (read, then DATA_DONE) or a PULL's answer (written).
  void Transfer(Direction dir) {
    auto self = shared_from_this();
    buf_.resize(kChunk);
    TransferChunks(dir, sock_, buf_, remaining_, [self, dir](const boost::system::error_code& ec) {
      if (ec) return self->Close();
      if (dir == Direction::kWrite) return self->ReadHeader();
      self->reply_ = Encode(kDataDone, 0);
      asio::async_write(self->sock_, asio::buffer(self->reply_),
                        [self](const boost::system::error_code& ec, size_t) {
                          if (ec) return self->Close();
                          self->ReadHeader();
                        });
    });
  }

  // A malformed message: say why, then hang up.
  void Reject(const std::string& why) {
    LauncherLog()->warn("netcheck probe from {}: {}; closing", peer_, why);
    Hangup(why);
  }

  void Hangup(const std::string& why) {
    if (closing_) return;
    closing_ = true;
    ++shared_->rejected;
    handshake_timer_.cancel();
    error_text_ = why.substr(0, kMaxErrorText);
    reply_ = Encode(kError, error_text_.size());
    std::array<asio::const_buffer, 2> out = {asio::buffer(reply_), asio::buffer(error_text_)};
    auto self = shared_from_this();
    asio::async_write(sock_, out, [self](const boost::system::error_code& ec, size_t) {
      if (ec) return self->Close();
      // Close gracefully: a close with unread input would send a reset, which may destroy
      // the ERROR before the client reads it. So read and discard until the client hangs
      // up, for at most a moment.
      boost::system::error_code ignored;
      self->sock_.shutdown(tcp::socket::shutdown_send, ignored);
      self->Arm(std::min<std::chrono::milliseconds>(self->opts_.connection_timeout,
                                                    std::chrono::seconds(2)));
      self->Discard();
    });
  }

  void Discard() {
    buf_.resize(kChunk);
    auto self = shared_from_this();
    sock_.async_read_some(asio::buffer(buf_), [self](const boost::system::error_code& ec, size_t) {
      if (ec) return self->Close();
      self->Discard();
    });
  }

  tcp::socket sock_;
  asio::steady_timer timer_;
  asio::steady_timer handshake_timer_;
  ProbeServerOptions opts_;
  std::shared_ptr<ServerShared> shared_;
  std::string peer_;
  std::string key_;  // the key the client sent
  bool waiting_for_key_ = false;
  bool authenticated_ = false;
  bool closing_ = false;
  Header hdr_{};
  Header reply_{};
  std::vector<uint8_t> small_;
  std::vector<uint8_t> buf_;
  std::string error_text_;
  uint64_t remaining_ = 0;
};

}  // namespace

using probe_wire::tcp;

struct ProbeServer::Impl : std::enable_shared_from_this<ProbeServer::Impl> {
  explicit Impl(boost::asio::io_context& io) : acceptor(io) {}

  void Accept() {
    std::weak_ptr<Impl> weak = shared_from_this();
    acceptor.async_accept([weak](const boost::system::error_code& ec, tcp::socket sock) {
      auto self = weak.lock();
      if (!self || self->stopped) return;
      if (!ec) {
        std::erase_if(self->sessions, [](const auto& w) { return w.expired(); });
        if (self->sessions.size() >= self->shared->opts.max_connections) {
          ++self->shared->rejected;
          boost::system::error_code ignored;
          sock.close(ignored);
          return self->Accept();
        }
        ++self->accepted;
        auto s = std::make_shared<ServerSession>(std::move(sock), self->shared);
        self->sessions.push_back(s);
        s->Start();
      } else {
        LauncherLog()->warn("netcheck probe server: accept failed: {}", ec.message());
      }
      self->Accept();
    });
  }

  tcp::acceptor acceptor;
  std::shared_ptr<ServerShared> shared = std::make_shared<ServerShared>();
  std::vector<std::weak_ptr<ServerSession>> sessions;
  bool stopped = false;
  uint64_t accepted = 0;
};

Result<std::unique_ptr<ProbeServer>> ProbeServer::Listen(boost::asio::io_context& io,
                                                         const std::string& address, uint16_t port,
                                                         ProbeServerOptions options) {
  boost::system::error_code ec;
  asio::ip::address ip = address.empty() ? asio::ip::address(asio::ip::address_v4::any())
                                         : asio::ip::make_address(address, ec);
  std::string where =
      fmt::format("netcheck probe server on {}:{}", address.empty() ? "0.0.0.0" : address, port);
  if (ec) return Error{where + ": '" + address + "' is not an IP address"};
  auto impl = std::make_shared<Impl>(io);
  impl->shared->opts = options;
  tcp::endpoint ep(ip, port);
  if (impl->acceptor.open(ep.protocol(), ec)) return Error{where + ": " + ec.message()};
  impl->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (impl->acceptor.bind(ep, ec)) return Error{where + ": bind: " + ec.message()};
  if (impl->acceptor.listen(asio::socket_base::max_listen_connections, ec)) {
    return Error{where + ": listen: " + ec.message()};
  }
  uint16_t bound = impl->acceptor.local_endpoint(ec).port();
  if (ec) return Error{where + ": " + ec.message()};
  impl->Accept();
  return std::unique_ptr<ProbeServer>(new ProbeServer(std::move(impl), bound));
}

ProbeServer::~ProbeServer() { Stop(); }

void ProbeServer::Stop() {
  if (impl_->stopped) return;
  impl_->stopped = true;
  boost::system::error_code ec;
  impl_->acceptor.close(ec);
  // Closed sessions end in their pending handlers (operation_aborted).
  for (auto& w : impl_->sessions) {
    if (auto s = w.lock()) s->Close();
  }
  impl_->sessions.clear();
}

void ProbeServer::SetKey(std::string key) {
  impl_->shared->key = std::move(key);
  for (auto& w : impl_->sessions) {
    if (auto s = w.lock()) s->KeyChanged();
  }
}

uint64_t ProbeServer::accepted() const { return impl_->accepted; }
uint64_t ProbeServer::rejected() const { return impl_->shared->rejected; }
uint64_t ProbeServer::refused() const { return impl_->shared->refused; }

}  // namespace ftrun::launcher
