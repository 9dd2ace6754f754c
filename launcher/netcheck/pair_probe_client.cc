// ProbeClient (declared in pair_probe.h): the connecting side of a pair probe.
#include <fmt/format.h>

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <vector>

#include "common/log.h"
#include "launcher/netcheck/name_resolver.h"
#include "launcher/netcheck/pair_probe.h"
#include "launcher/netcheck/probe_wire.h"

namespace ftrun::launcher {

using namespace probe_wire;

// The probe's state. Owned by its pending handlers (and the ProbeClient); once done_ is set,
// every handler returns at once.
struct ProbeClient::Session : std::enable_shared_from_this<ProbeClient::Session> {
  Session(asio::io_context& io, std::string host, uint16_t port, ProbeOptions opts, Handler done)
      : resolver(io),
        sock(io),
        timer(io),
        host(std::move(host)),
        port(port),
        opts(opts),
        handler(std::move(done)) {}

  void Run() {
    start = Clock::now();
    result.bytes = opts.bytes;
    auto self = shared_from_this();
    timer.expires_after(opts.timeout);
    timer.async_wait([self](const boost::system::error_code& ec) {
      if (ec || self->done) return;
      self->Fail(fmt::format("timed out after {:g} s",
                             std::chrono::duration<double>(self->opts.timeout).count()));
    });
    phase = "resolving the address";
    resolver.Resolve(
        host, port, [self](const boost::system::error_code& ec, NameResolver::Endpoints endpoints) {
          if (self->done) return;
          if (ec) return self->Fail("resolve: " + ec.message());
          self->phase = "connecting";
          asio::async_connect(self->sock, endpoints,
                              [self](const boost::system::error_code& ec, const tcp::endpoint&) {
                                if (self->done) return;
                                if (ec) return self->Fail("connect: " + ec.message());
                                boost::system::error_code ignored;
                                self->sock.set_option(tcp::no_delay(true), ignored);
                                self->SendKey();
                              });
        });
  }

  // The handshake (pair_probe.h): KEY first. The server does not acknowledge it; a refusal
  // comes back as ERROR in place of the first PONG.
  void SendKey() {
    phase = "sending the probe key";
    if (opts.key.size() < kMinProbeKey || opts.key.size() > kMaxProbeKey) {
      return Fail("this check has no usable probe key (is the rendezvous older than this agent?)");
    }
    out_header = Encode(kKey, opts.key.size());
    std::array<asio::const_buffer, 2> out = {asio::buffer(out_header), asio::buffer(opts.key)};
    auto self = shared_from_this();
    asio::async_write(sock, out, [self](const boost::system::error_code& ec, size_t) {
      if (self->Failed(ec, "send")) return;
      self->Ping(0);
    });
  }

  void Ping(int i) {
    phase = "latency";
    auto self = shared_from_this();
    out_header = Encode(kPing, 8);
    payload = ToBigEndian64(static_cast<uint64_t>(i));
    std::array<asio::const_buffer, 2> out = {asio::buffer(out_header), asio::buffer(payload)};
    auto t0 = Clock::now();
    asio::async_write(sock, out, [self, i, t0](const boost::system::error_code& ec, size_t) {
      if (self->Failed(ec, "send")) return;
      self->ReadReply(kPong, [self, i, t0](uint64_t len) {
        if (len != 8) return self->Fail(fmt::format("PONG of {} bytes (wanted 8)", len));
        asio::async_read(
            self->sock, asio::buffer(self->reply_payload),
            [self, i, t0](const boost::system::error_code& ec, size_t) {
              if (self->Failed(ec, "receive")) return;
              if (self->reply_payload != self->payload) {
                return self->Fail("PONG does not echo the PING");
              }
              self->rtts.push_back(
                  std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
              if (i + 1 < std::max(1, self->opts.pings)) return self->Ping(i + 1);
              self->Upload();
            });
      });
    });
  }

  void Upload() {
    if (opts.bytes == 0) return Finish();
    phase = "upload";
    data.assign(static_cast<size_t>(std::min<uint64_t>(opts.bytes, kChunk)), 0x5a);
    remaining = opts.bytes;
    t_upload = Clock::now();
    out_header = Encode(kData, opts.bytes);
    auto self = shared_from_this();
    asio::async_write(
        sock, asio::buffer(out_header), [self](const boost::system::error_code& ec, size_t) {
          if (self->Failed(ec, "send")) return;
          self->Transfer(Direction::kWrite, [self] {
            self->ReadReply(kDataDone, [self](uint64_t len) {
              if (len != 0) {
                return self->Fail(fmt::format("DATA_DONE with {} bytes", len));
              }
              self->result.upload_mbps = Mbps(self->opts.bytes, Clock::now() - self->t_upload);
              self->Download();
            });
          });
        });
  }

  void Download() {
    phase = "download";
    t_download = Clock::now();
    out_header = Encode(kPull, 8);
    payload = ToBigEndian64(opts.bytes);
    std::array<asio::const_buffer, 2> out = {asio::buffer(out_header), asio::buffer(payload)};
    auto self = shared_from_this();
    asio::async_write(sock, out, [self](const boost::system::error_code& ec, size_t) {
      if (self->Failed(ec, "send")) return;
      self->ReadReply(kData, [self](uint64_t len) {
        if (len != self->opts.bytes) {
          return self->Fail(fmt::format("DATA of {} bytes (asked for {})", len, self->opts.bytes));
        }
        self->remaining = len;
        self->Transfer(Direction::kRead, [self] {
          self->result.download_mbps = Mbps(self->opts.bytes, Clock::now() - self->t_download);
          self->Finish();
        });
      });
    });
  }

  // Moves `remaining` bytes of `data` (sending or receiving), then `next`.
  void Transfer(Direction dir, std::function<void()> next) {
    auto self = shared_from_this();
    TransferChunks(dir, sock, data, remaining,
                   [self, dir, next = std::move(next)](const boost::system::error_code& ec) {
                     if (self->Failed(ec, dir == Direction::kWrite ? "send" : "receive")) return;
                     next();
                   });
  }

  // Reads a header and hands its length to `next` if it has type `want`; an ERROR from the
  // server, a malformed header or another type fails the probe.
  template <class Next>
  void ReadReply(uint8_t want, Next next) {
    auto self = shared_from_this();
    asio::async_read(
        sock, asio::buffer(in_header),
        [self, want, next](const boost::system::error_code& ec, size_t) {
          if (self->Failed(ec, "receive")) return;
          auto d = Decode(self->in_header);
          if (!d) return self->Fail("bad reply: " + d.error().message);
          if (d->type == kError && d->length <= kMaxErrorText) {
            self->error_text.resize(d->length);
            asio::async_read(self->sock, asio::buffer(self->error_text),
                             [self](const boost::system::error_code& ec, size_t) {
                               if (self->Failed(ec, "receive")) return;
                               self->Fail("the peer rejected the probe: " + self->error_text);
                             });
            return;
          }
          if (d->type != want) {
            return self->Fail(
                fmt::format("bad reply: message type {} (expected {})", d->type, want));
          }
          next(d->length);
        });
  }

  // True (and the probe failed) when ec is an error; false when the handler may go on.
  bool Failed(const boost::system::error_code& ec, const char* what) {
    if (done) return true;
    if (!ec) return false;
    Fail(fmt::format("{}: {}", what,
                     ec == asio::error::eof ? "the peer closed the connection" : ec.message()));
    return true;
  }

  void Fail(const std::string& why) {
    Complete(Error{fmt::format("netcheck probe to {}:{}: {} (during {})", host, port, why, phase)});
  }

  void Finish() {
    std::vector<double> v = rtts;
    std::sort(v.begin(), v.end());
    if (!v.empty()) {
      size_t n = v.size();
      result.rtt_ms = n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    }
    result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    LauncherLog()->debug("netcheck probe to {}:{}: up {:.1f} MB/s down {:.1f} MB/s rtt {:.3f} ms",
                         host, port, result.upload_mbps, result.download_mbps, result.rtt_ms);
    Complete(Ok(result));
  }

  // The one exit: stops everything, then calls the handler last (it may destroy the client).
  void Complete(Result<ProbeResult> r) {
    if (done) return;
    Cancel();
    Handler h = std::move(handler);
    handler = nullptr;
    if (h) h(std::move(r));
  }

  void Cancel() {
    done = true;
    boost::system::error_code ec;
    resolver.Cancel();
    sock.close(ec);
    timer.cancel();
  }

  NameResolver resolver;  // not the loop's: a fork on the loop would strand the lookup
  tcp::socket sock;
  asio::steady_timer timer;
  std::string host;
  uint16_t port;
  ProbeOptions opts;
  Handler handler;

  bool done = false;
  std::string phase;
  ProbeResult result;
  std::vector<double> rtts;
  Clock::time_point start, t_upload, t_download;
  uint64_t remaining = 0;
  Header out_header{}, in_header{};
  std::array<uint8_t, 8> payload{}, reply_payload{};
  std::vector<uint8_t> data;
  std::string error_text;
};

std::unique_ptr<ProbeClient> ProbeClient::Start(asio::io_context& io, const std::string& host,
                                                uint16_t port, ProbeOptions options, Handler done) {
  auto s = std::make_shared<Session>(io, host, port, options, std::move(done));
  s->Run();
  return std::unique_ptr<ProbeClient>(new ProbeClient([s] {
    s->handler = nullptr;
    s->Cancel();
  }));
}

}  // namespace ftrun::launcher
