#include "common/metrics_server.h"

#include <fmt/format.h>

#include <boost/asio/ip/v6_only.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>

#include "common/log.h"

namespace ftrun {

namespace ip = boost::asio::ip;

std::string PromMetric(const std::string& name, const std::string& type, const std::string& help,
                       double value, const std::string& labels) {
  return fmt::format("# HELP {0} {1}\n# TYPE {0} {2}\n{0}{3} {4}\n", name, help, type,
                     labels.empty() ? "" : "{" + labels + "}", value);
}

MetricsServer::MetricsServer(boost::asio::io_context& io, Render render)
    : io_(io), render_(std::move(render)), acceptor_(io) {}

MetricsServer::~MetricsServer() { Stop(); }

Result<int> MetricsServer::Start(int port) {
  boost::system::error_code ec;
  ip::tcp::endpoint ep(ip::address_v6::any(), static_cast<unsigned short>(port));
  acceptor_.open(ep.protocol(), ec);
  if (!ec) acceptor_.set_option(ip::v6_only(false), ec);
  if (ec) {  // no IPv6 here
    ep = ip::tcp::endpoint(ip::address_v4::any(), static_cast<unsigned short>(port));
    ec.clear();
    acceptor_.close(ec);
    acceptor_.open(ep.protocol(), ec);
  }
  if (!ec) acceptor_.set_option(ip::tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(ep, ec);
  if (!ec) acceptor_.listen(64, ec);
  if (ec) return Error{"--metrics-port " + std::to_string(port) + ": " + ec.message()};
  Accept();
  return static_cast<int>(acceptor_.local_endpoint().port());
}

void MetricsServer::Stop() {
  *alive_ = false;
  boost::system::error_code ec;
  acceptor_.close(ec);
}

// One request: its socket, the head read so far, and the deadline for the whole exchange.
// Counted in `open` while it lives.
struct MetricsServer::Connection {
  Connection(boost::asio::io_context& io, std::shared_ptr<size_t> open)
      : socket(io), buf(8192), deadline(io), open(std::move(open)) {
    ++*this->open;
  }
  ~Connection() { --*open; }
  ip::tcp::socket socket;
  boost::asio::streambuf buf;
  boost::asio::steady_timer deadline;
  std::shared_ptr<size_t> open;
};

void MetricsServer::Accept() {
  auto c = std::make_shared<Connection>(io_, open_);
  std::weak_ptr<bool> alive = alive_;
  acceptor_.async_accept(c->socket, [this, alive, c](const boost::system::error_code& ec) {
    auto a = alive.lock();
    if (!a || !*a) return;
    if (ec) {
      // Out of descriptors, say: try again a little later rather than spin on the loop.
      auto retry = std::make_shared<boost::asio::steady_timer>(io_, std::chrono::milliseconds(100));
      retry->async_wait([this, alive, retry](const boost::system::error_code&) {
        if (auto a = alive.lock(); a && *a) Accept();
      });
      return;
    }
    if (*open_ > kMaxMetricsConnections) {  // this one counts too
      boost::system::error_code ignored;
      c->socket.close(ignored);
    } else {
      Serve(c);
    }
    Accept();
  });
}

void MetricsServer::Serve(const std::shared_ptr<Connection>& c) {
  std::weak_ptr<bool> alive = alive_;
  std::weak_ptr<Connection> weak = c;
  c->deadline.expires_after(timeout_);
  c->deadline.async_wait([weak](const boost::system::error_code& ec) {
    auto conn = weak.lock();
    if (ec || !conn) return;
    boost::system::error_code ignored;
    conn->socket.close(ignored);  // the pending read or write ends with an error
  });
  boost::asio::async_read_until(
      c->socket, c->buf, "\r\n\r\n",
      [this, alive, c](const boost::system::error_code& rec, size_t) {
        auto a = alive.lock();
        if (!a || !*a || rec) return;  // oversized, cut short or too slow: just drop it
        std::string head(boost::asio::buffers_begin(c->buf.data()),
                         boost::asio::buffers_end(c->buf.data()));
        const bool metrics =
            head.rfind("GET /metrics ", 0) == 0 || head.rfind("GET /metrics?", 0) == 0;
        std::string body = metrics ? render_() : "not found: try /metrics\n";
        auto reply = std::make_shared<std::string>(
            fmt::format("HTTP/1.1 {}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                        "Content-Length: {}\r\nConnection: close\r\n\r\n{}",
                        metrics ? "200 OK" : "404 Not Found", body.size(), body));
        boost::asio::async_write(c->socket, boost::asio::buffer(*reply),
                                 [c, reply](const boost::system::error_code&, size_t) {
                                   boost::system::error_code ignored;
                                   c->socket.shutdown(ip::tcp::socket::shutdown_both, ignored);
                                   c->deadline.cancel();
                                 });
      });
}

}  // namespace ftrun
