// MetricsServer with real TCP sockets on loopback: it answers /metrics, and neither idle
// connections nor a flood of them can exhaust it (issue 17).
#include "common/metrics_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/test_support.h"

namespace ftrun {
namespace {

using namespace std::chrono_literals;

// A plain non-blocking TCP client on 127.0.0.1.
class Peer {
 public:
  explicit Peer(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);  // EINPROGRESS
  }
  ~Peer() { ::close(fd_); }
  bool Send(const std::string& s) { return ::send(fd_, s.data(), s.size(), MSG_NOSIGNAL) > 0; }
  // Reads what arrived; true once the server closed (EOF or reset).
  bool Closed() {
    char buf[4096];
    for (;;) {
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n > 0) {
        got_.append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n == 0) return true;
      return errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOTCONN;
    }
  }
  const std::string& got() const { return got_; }

 private:
  int fd_ = -1;
  std::string got_;
};

class MetricsServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<MetricsServer>(io_, [] { return std::string("up 1\n"); });
    auto port = server_->Start(0);
    ASSERT_TRUE(port);
    port_ = *port;
  }
  bool Pump(const std::function<bool()>& cond, std::chrono::milliseconds t = 5s) {
    return testing::WaitFor(
        [&] {
          io_.run_for(2ms);
          return cond();
        },
        t);
  }
  boost::asio::io_context io_;
  std::unique_ptr<MetricsServer> server_;
  int port_ = 0;
};

TEST_F(MetricsServerTest, AnswersMetrics) {
  Peer p(port_);
  ASSERT_TRUE(Pump([&] { return p.Send("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"); }));
  ASSERT_TRUE(Pump([&] { return p.Closed(); }));
  EXPECT_NE(p.got().find("200 OK"), std::string::npos) << p.got();
  EXPECT_NE(p.got().find("up 1"), std::string::npos) << p.got();
}

// Idle connections are closed after the request timeout; beyond the cap a new connection is
// closed at once; once the idle ones are gone, requests are served again.
TEST_F(MetricsServerTest, IdleConnectionsAreCappedAndTimedOut) {
  server_->TEST_SetRequestTimeout(1500ms);
  std::vector<std::unique_ptr<Peer>> idle;
  for (size_t i = 0; i < kMaxMetricsConnections; ++i) {
    idle.push_back(std::make_unique<Peer>(port_));
    io_.run_for(5ms);
  }
  Peer extra(port_);
  ASSERT_TRUE(Pump([&] { return extra.Closed(); }, 1000ms));
  EXPECT_EQ(extra.got(), "");
  for (auto& p : idle) EXPECT_FALSE(p->Closed());
  ASSERT_TRUE(Pump([&] {
    for (auto& p : idle) {
      if (!p->Closed()) return false;
    }
    return true;
  }));
  Peer late(port_);
  ASSERT_TRUE(Pump([&] { return late.Send("GET /metrics HTTP/1.1\r\n\r\n"); }));
  ASSERT_TRUE(Pump([&] { return late.Closed(); }));
  EXPECT_NE(late.got().find("up 1"), std::string::npos) << late.got();
}

}  // namespace
}  // namespace ftrun
