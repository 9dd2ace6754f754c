// MetricsServer: --metrics-port. A minimal HTTP/1.1 responder on Boost.Asio serving
// Prometheus' text format at GET /metrics (404 elsewhere, one request per connection). The
// body comes from a callback, so the agent and `ftrun master` render their own figures.
// Limits, so that no client can exhaust the process: a request head of at most 8 KiB, read
// and answered within kMetricsRequestTimeout, and at most kMaxMetricsConnections at once (one
// more is closed at once, unanswered).
// Thread: loop only. Errors: Start() names the port; a bad request closes its connection.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "common/result.h"

namespace ftrun {

inline constexpr size_t kMaxMetricsConnections = 16;
inline constexpr std::chrono::seconds kMetricsRequestTimeout{5};

class MetricsServer {
 public:
  using Render = std::function<std::string()>;
  MetricsServer(boost::asio::io_context& io, Render render);
  ~MetricsServer();
  // Listens on every address; port 0 picks one. Returns the port.
  Result<int> Start(int port);
  void Stop();
  // Tests only: a shorter limit than kMetricsRequestTimeout.
  void TEST_SetRequestTimeout(std::chrono::milliseconds t) { timeout_ = t; }

 private:
  struct Connection;
  void Accept();
  void Serve(const std::shared_ptr<Connection>& c);
  boost::asio::io_context& io_;
  Render render_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::chrono::milliseconds timeout_ = kMetricsRequestTimeout;
  std::shared_ptr<size_t> open_ = std::make_shared<size_t>(0);  // connections being served
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

// Prometheus text format: "# HELP", "# TYPE" and one sample line.
std::string PromMetric(const std::string& name, const std::string& type, const std::string& help,
                       double value, const std::string& labels = "");

}  // namespace ftrun
