#include "common/metrics_server.h"

#include <fmt/format.h>

#include <boost/asio/ip/v6_only.hpp>
#include <boost/asio/read_until.hpp>
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

void MetricsServer::Accept() {
  auto socket = std::make_shared<ip::tcp::socket>(io_);
  std::weak_ptr<bool> alive = alive_;
  acceptor_.async_accept(*socket, [this, alive, socket](const boost::system::error_code& ec) {
    auto a = alive.lock();
    if (!a || !*a) return;
    if (!ec) {
      auto buf = std::make_shared<boost::asio::streambuf>(8192);
      boost::asio::async_read_until(
          *socket, *buf, "\r\n\r\n",
          [this, alive, socket, buf](const boost::system::error_code& rec, size_t) {
            auto a = alive.lock();
            if (!a || !*a || rec) return;  // oversized or cut short: just drop it
            std::string head(boost::asio::buffers_begin(buf->data()),
                             boost::asio::buffers_end(buf->data()));
            const bool metrics =
                head.rfind("GET /metrics ", 0) == 0 || head.rfind("GET /metrics?", 0) == 0;
            std::string body = metrics ? render_() : "not found: try /metrics\n";
            auto reply = std::make_shared<std::string>(fmt::format(
                "HTTP/1.1 {}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                "Content-Length: {}\r\nConnection: close\r\n\r\n{}",
                metrics ? "200 OK" : "404 Not Found", body.size(), body));
            boost::asio::async_write(*socket, boost::asio::buffer(*reply),
                                     [socket, reply](const boost::system::error_code&, size_t) {
                                       boost::system::error_code ignored;
                                       socket->shutdown(ip::tcp::socket::shutdown_both, ignored);
                                     });
          });
    }
    Accept();
  });
}

}  // namespace ftrun
