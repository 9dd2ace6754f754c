// The agent store's server on real loopback sockets: torch 1.13's exchanges, a WAIT answered
// when another connection sets the key, and hostile input (malformed, oversized, unknown,
// newer torch, slow, unread, too many connections) closing only the culprit's connection.
#include "store/store_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <functional>

#include "store/wire.h"

namespace ftrun::store {
namespace {

using namespace std::chrono_literals;
using namespace std::string_literals;

std::string Str(std::string_view s) {
  std::string out;
  AppendString(out, s);
  return out;
}
std::string U64(uint64_t v) {
  std::string out;
  AppendI64(out, static_cast<int64_t>(v));
  return out;
}
std::string Set(std::string_view k, std::string_view v) { return "\x00"s + Str(k) + Str(v); }
std::string Get(std::string_view k) { return "\x02" + Str(k); }
std::string Wait(std::string_view k) { return "\x05" + U64(1) + Str(k); }
std::string Add(std::string_view k, int64_t d) {
  std::string out = "\x03" + Str(k);
  AppendI64(out, d);
  return out;
}
std::string I64(int64_t v) {
  std::string out;
  AppendI64(out, v);
  return out;
}

class StoreServerTest : public ::testing::Test {
 protected:
  void Start(StoreServerOptions o = {}) {
    o.address = "127.0.0.1";
    auto s = StoreServer::Listen(io_, o);
    ASSERT_TRUE(s) << s.error().message;
    server_ = std::move(*s);
  }
  void TearDown() override {
    for (int fd : fds_) ::close(fd);
  }

  bool Pump(const std::function<bool()>& done, std::chrono::milliseconds limit = 5s) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      io_.run_for(2ms);
    }
    return true;
  }

  // From 127.0.0.1, or from another loopback address (`from`, e.g. "127.0.0.2").
  int Connect(const char* from = nullptr) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (from) {
      sockaddr_in src{};
      src.sin_family = AF_INET;
      ::inet_pton(AF_INET, from, &src.sin_addr);
      EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof(src)), 0) << from;
    }
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(server_->port());
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));  // EINPROGRESS
    fds_.push_back(fd);
    return fd;
  }

  void Send(int fd, const std::string& bytes) {
    size_t at = 0;
    ASSERT_TRUE(Pump([&] {
      ssize_t n = ::send(fd, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
      if (n > 0) at += n;
      return at == bytes.size() || (n < 0 && errno != EAGAIN && errno != ENOTCONN);
    }));
  }

  // The next `n` bytes from the server ("" when it closed first or 5 s passed).
  std::string Recv(int fd, size_t n) {
    std::string got;
    bool closed = false;
    Pump([&] {
      char buf[4096];
      ssize_t r = ::recv(fd, buf, std::min(sizeof(buf), n - got.size()), 0);
      if (r > 0) got.append(buf, r);
      if (r == 0 || (r < 0 && errno != EAGAIN)) closed = true;
      return closed || got.size() == n;
    });
    return got.size() == n ? got : "";
  }

  // Whether the server closes `fd` (reads and discards what comes first).
  bool ClosedByServer(int fd, std::chrono::milliseconds limit = 5s) {
    return Pump(
        [&] {
          char buf[4096];
          ssize_t r = ::recv(fd, buf, sizeof(buf), 0);
          return r == 0 || (r < 0 && errno != EAGAIN);
        },
        limit);
  }

  boost::asio::io_context io_;
  std::unique_ptr<StoreServer> server_;
  std::vector<int> fds_;
};

TEST_F(StoreServerTest, AWaitIsAnsweredWhenAnotherConnectionSetsTheKey) {
  Start();
  int a = Connect(), b = Connect();
  Send(a, Wait("/k"));
  ASSERT_TRUE(Pump([&] { return server_->connections() == 2; }));
  io_.run_for(20ms);
  Send(b, Set("/k", "v1") + Get("/k"));
  EXPECT_EQ(Recv(b, 10), U64(2) + "v1");
  EXPECT_EQ(Recv(a, 1), std::string(1, '\0'));  // STOP_WAITING
  EXPECT_EQ(server_->keys(), 1u);
  // Requests split into single bytes are served the same.
  for (char ch : Get("/k")) Send(a, std::string(1, ch));
  EXPECT_EQ(Recv(a, 10), U64(2) + "v1");
}

struct Hostile {
  const char* name;
  std::string bytes;
  const char* expected_reason;
};

TEST_F(StoreServerTest, HostileRequestsCloseOnlyTheirConnection) {
  StoreServerOptions o;
  o.limits.max_key_bytes = 64;
  o.limits.max_value_bytes = 1024;
  o.limits.max_total_bytes = 4096;
  Start(o);
  int good = Connect();
  Send(good, Set("/keep", "1"));
  const std::vector<Hostile> cases = {
      {"huge key length", "\x02" + U64(uint64_t{1} << 62), "key of"},
      {"huge value length", "\x00"s + Str("/k") + U64(uint64_t{1} << 40), "value of"},
      {"unknown query", "\x2a", "unknown query type 42"},
      {"newer torch", "\x00\xce\xf7\x85\x3c"s + std::string(20, '\0'), "torch >= 2.x"},
      {"GET of an unset key", Get("/nope"), "the key is not set"},
      {"ADD to text", "\x00"s + Str("/t") + Str("abc") + "\x03" + Str("/t") + U64(1),
       "not an integer"},
      {"store full",
       Set("/a", std::string(1000, 'x')) + Set("/b", std::string(1000, 'x')) +
           Set("/c", std::string(1000, 'x')) + Set("/d", std::string(1000, 'x')) +
           Set("/e", std::string(1000, 'x')),
       "full"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const uint64_t before = server_->rejected();
    int fd = Connect();
    Send(fd, c.bytes);
    EXPECT_TRUE(ClosedByServer(fd));
    EXPECT_EQ(server_->rejected(), before + 1);
  }
  // The well-behaved connection is untouched.
  Send(good, Get("/keep"));
  EXPECT_EQ(Recv(good, 9), U64(1) + "1");
}

TEST_F(StoreServerTest, SlowIncompleteRequestsAreClosedIdleConnectionsKept) {
  StoreServerOptions o;
  o.request_timeout = 300ms;
  Start(o);
  int idle = Connect();
  int slow = Connect();
  Send(slow, "\x00"s + Str("/k").substr(0, 5));  // half a request, then nothing
  EXPECT_TRUE(ClosedByServer(slow));
  io_.run_for(1500ms);  // idle for longer than the request timeout: still served
  Send(idle, "\x06");
  EXPECT_EQ(Recv(idle, 8), U64(0));
}

TEST_F(StoreServerTest, ConnectionsAndUnreadAnswersAreBounded) {
  StoreServerOptions o;
  o.max_connections = 3;
  o.max_unread_bytes = 64 * 1024;
  Start(o);
  int a = Connect();
  Connect();
  Connect();
  ASSERT_TRUE(Pump([&] { return server_->connections() == 3; }));
  int extra = Connect();
  EXPECT_TRUE(ClosedByServer(extra));
  EXPECT_EQ(server_->connections(), 3u);
  // A client that asks and never reads: closed once its answers pass the bound.
  std::string flood = Set("/v", std::string(16 * 1024, 'x'));
  for (int i = 0; i < 64; ++i) flood += Get("/v");
  int greedy = -1;
  ::shutdown(a, SHUT_RDWR);
  ASSERT_TRUE(Pump([&] { return server_->connections() == 2; }));
  greedy = Connect();
  int rcvbuf = 4096;
  ::setsockopt(greedy, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
  Send(greedy, flood);
  EXPECT_TRUE(Pump([&] { return server_->rejected() == 2; }));
  EXPECT_TRUE(ClosedByServer(greedy));
  EXPECT_EQ(server_->connections(), 2u);
}

// One address cannot take every connection: the others (another node's ranks) still connect.
TEST_F(StoreServerTest, ConnectionsFromOneAddressAreBounded) {
  StoreServerOptions o;
  o.max_connections = 16;
  o.max_connections_per_peer = 2;
  Start(o);
  Connect();
  int second = Connect();
  ASSERT_TRUE(Pump([&] { return server_->connections() == 2; }));
  int third = Connect();
  EXPECT_TRUE(ClosedByServer(third));
  EXPECT_EQ(server_->rejected(), 1u);
  int other = Connect("127.0.0.2");
  ASSERT_TRUE(Pump([&] { return server_->connections() == 3; }));
  Send(other, Set("/k", "v") + Get("/k"));
  EXPECT_EQ(Recv(other, 9), U64(1) + "v") << "served";
  // A closed connection gives its place back.
  ::shutdown(second, SHUT_RDWR);
  ASSERT_TRUE(Pump([&] { return server_->connections() == 2; }));
  Connect();
  ASSERT_TRUE(Pump([&] { return server_->connections() == 3; }));
  EXPECT_EQ(server_->rejected(), 1u);
}

// torch's store-based barrier polls with ADD 0: with the world size known, a poll that would
// read too few ranks is answered when the last one adds itself, then the connection's next
// request; other keys, and an unknown world size, are answered at once.
TEST_F(StoreServerTest, ABarrierPollIsAnsweredWhenTheLastRankArrives) {
  const std::string key = "//worker/attempt_0/default_pg/store_based_barrier_key:1";
  StoreServerOptions o;
  o.barrier_hold = 60s;  // no release by the clock in this test
  Start(o);
  server_->SetWorldSize(2);
  int a = Connect(), b = Connect();
  Send(a, Add(key, 1) + Add(key, 0) + Get("/after"));
  EXPECT_EQ(Recv(a, 8), I64(1));
  Send(b, Set("/after", "x") + Add("/other_key:1", 0) + Add(key, 1) + Add(key, 0));
  EXPECT_EQ(Recv(b, 24), I64(0) + I64(2) + I64(2));  // b's own poll is complete already
  EXPECT_EQ(Recv(a, 8 + 9), I64(2) + U64(1) + "x");  // a's poll read 2, then its GET
  // Without a world size nothing is held.
  server_->SetWorldSize(0);
  const std::string next = "//worker/attempt_0/default_pg/store_based_barrier_key:2";
  Send(a, Add(next, 1) + Add(next, 0));
  EXPECT_EQ(Recv(a, 16), I64(1) + I64(1));
}

TEST_F(StoreServerTest, AHeldBarrierPollIsAnsweredAfterTheHoldBound) {
  const std::string key = "/default_pg/store_based_barrier_key:1";
  StoreServerOptions o;
  o.barrier_hold = 30ms;
  Start(o);
  server_->SetWorldSize(4);
  int a = Connect();
  Send(a, Add(key, 1) + Add(key, 0));
  EXPECT_EQ(Recv(a, 16), I64(1) + I64(1));  // nobody else came: the count as it is
  // A client that closes while held leaves nothing behind.
  int b = Connect();
  Send(b, Add(key, 1) + Add(key, 0));
  EXPECT_EQ(Recv(b, 8), I64(2));
  ::close(b);
  fds_.pop_back();
  ASSERT_TRUE(Pump([&] { return server_->connections() == 1; }));
  Send(a, Add(key, 0));
  EXPECT_EQ(Recv(a, 8), I64(2));
}

TEST_F(StoreServerTest, AHeldPortIsOneClearError) {
  Start();
  StoreServerOptions o;
  o.address = "127.0.0.1";
  o.port = server_->port();
  auto again = StoreServer::Listen(io_, o);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().message, "agent store: cannot listen on 127.0.0.1:" +
                                       std::to_string(o.port) + ": Address already in use");
}

}  // namespace
}  // namespace ftrun::store
