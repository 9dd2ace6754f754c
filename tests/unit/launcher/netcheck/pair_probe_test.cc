#include "launcher/netcheck/pair_probe.h"

#include <gtest/gtest.h>

#include <array>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <optional>
#include <vector>

#include "launcher/workers/worker_process.h"

namespace ftrun::launcher {
namespace {

using namespace std::chrono_literals;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

class PairProbeTest : public ::testing::Test {
 protected:
  // Runs the loop until `done` holds or 5 s pass.
  bool RunUntil(const std::function<bool()>& done) {
    auto deadline = std::chrono::steady_clock::now() + 5s;
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      io_.run_for(5ms);
    }
    return true;
  }

  // Runs one probe to 127.0.0.1:port and returns its result.
  Result<ProbeResult> Probe(uint16_t port, ProbeOptions opts) {
    std::optional<Result<ProbeResult>> got;
    int calls = 0;
    auto client = ProbeClient::Start(io_, "127.0.0.1", port, opts, [&](Result<ProbeResult> r) {
      ++calls;
      got = std::move(r);
    });
    EXPECT_TRUE(RunUntil([&] { return got.has_value(); }));
    io_.run_for(20ms);  // nothing else may arrive
    EXPECT_EQ(calls, 1);
    if (!got) return Error{"no result"};
    return *got;
  }

  // A header as the probe protocol lays it out (see pair_probe.h).
  static std::array<uint8_t, 16> Header(const char magic[4], uint8_t version, uint8_t type,
                                        uint64_t length) {
    std::array<uint8_t, 16> h{};
    for (int i = 0; i < 4; ++i) h[i] = static_cast<uint8_t>(magic[i]);
    h[4] = version;
    h[5] = type;
    for (int i = 0; i < 8; ++i) h[8 + i] = static_cast<uint8_t>(length >> (56 - 8 * i));
    return h;
  }

  // Sends `bytes` to the server raw and returns what it answers before hanging up.
  std::string SendRaw(uint16_t port, const std::array<uint8_t, 16>& bytes) {
    tcp::socket s(io_);
    boost::system::error_code ec;
    s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port), ec);
    EXPECT_FALSE(ec) << ec.message();
    asio::write(s, asio::buffer(bytes), ec);  // small: fits the socket buffer at once
    std::string got;
    std::array<char, 256> buf;
    bool closed = false;
    std::function<void()> read = [&] {
      s.async_read_some(asio::buffer(buf), [&](const boost::system::error_code& e, size_t n) {
        got.append(buf.data(), n);
        if (e) {
          closed = true;
          return;
        }
        read();
      });
    };
    read();
    EXPECT_TRUE(RunUntil([&] { return closed; }));
    return got;
  }

  asio::io_context io_;
};

TEST_F(PairProbeTest, MeasuresBothWaysAndLatency) {
  auto server = ProbeServer::Listen(io_, "127.0.0.1", 0);
  ASSERT_TRUE(server) << server.error().message;
  ASSERT_NE((*server)->port(), 0);
  ProbeOptions opts;
  opts.bytes = 4 << 20;
  opts.pings = 3;
  opts.timeout = 4s;
  auto r = Probe((*server)->port(), opts);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_GT(r->upload_mbps, 0);
  EXPECT_GT(r->download_mbps, 0);
  EXPECT_GT(r->rtt_ms, 0);
  EXPECT_LT(r->rtt_ms, 1000);
  EXPECT_EQ(r->bytes, 4u << 20);
  EXPECT_GT(r->seconds, 0);
  EXPECT_EQ((*server)->accepted(), 1u);
  EXPECT_EQ((*server)->rejected(), 0u);

  // Latency only.
  opts.bytes = 0;
  auto lat = Probe((*server)->port(), opts);
  ASSERT_TRUE(lat) << lat.error().message;
  EXPECT_EQ(lat->upload_mbps, 0);
  EXPECT_GT(lat->rtt_ms, 0);
}

TEST_F(PairProbeTest, TimesOutAgainstASilentPeer) {
  tcp::acceptor acceptor(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  std::optional<tcp::socket> accepted;
  acceptor.async_accept([&](const boost::system::error_code& ec, tcp::socket s) {
    if (!ec) accepted = std::move(s);  // kept open, never answered
  });
  ProbeOptions opts;
  opts.bytes = 1 << 20;
  opts.timeout = 300ms;
  auto t0 = std::chrono::steady_clock::now();
  auto r = Probe(acceptor.local_endpoint().port(), opts);
  ASSERT_FALSE(r);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  std::string want =
      "netcheck probe to 127.0.0.1:" + std::to_string(acceptor.local_endpoint().port()) +
      ": timed out after 0.3 s (during latency)";
  EXPECT_EQ(r.error().message, want);
  EXPECT_TRUE(accepted.has_value());
}

TEST_F(PairProbeTest, ConnectionRefusedNamesThePeer) {
  uint16_t port;
  {
    tcp::acceptor a(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    port = a.local_endpoint().port();
  }  // closed: nothing listens there now
  ProbeOptions opts;
  opts.timeout = 2s;
  auto r = Probe(port, opts);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "netcheck probe to 127.0.0.1:" + std::to_string(port) +
                                   ": connect: Connection refused (during connecting)");
}

TEST_F(PairProbeTest, ServerRejectsMalformedHeadersAndKeepsServing) {
  auto server = ProbeServer::Listen(io_, "127.0.0.1", 0);
  ASSERT_TRUE(server) << server.error().message;
  uint16_t port = (*server)->port();
  struct Case {
    std::array<uint8_t, 16> bytes;
    std::string reason;
  };
  std::vector<Case> cases = {
      {Header("GET ", 1, 1, 8), "bad magic 47455420 (not an ftrun netcheck probe)"},
      {Header("FTNP", 9, 1, 8), "unsupported probe version 9 (this is 1)"},
      {Header("FTNP", 1, 42, 0), "unexpected message type 42"},
      {Header("FTNP", 1, 1, 1000), "PING of 1000 bytes"},
      {Header("FTNP", 1, 3, uint64_t{1} << 40), "DATA of 1099511627776 bytes (at most 1073741824)"},
      {Header("FTNP", 1, 2, 0), "unexpected message type 2"},  // a PONG from a client
  };
  for (const auto& c : cases) {
    std::string reply = SendRaw(port, c.bytes);
    // An ERROR header, then the reason.
    ASSERT_GE(reply.size(), 16u) << c.reason;
    EXPECT_EQ(reply.substr(0, 4), "FTNP");
    EXPECT_EQ(static_cast<uint8_t>(reply[5]), 6) << c.reason;
    EXPECT_EQ(reply.substr(16), c.reason);
  }
  EXPECT_EQ((*server)->rejected(), cases.size());
  ProbeOptions opts;
  opts.bytes = 64 << 10;
  opts.timeout = 3s;
  auto r = Probe(port, opts);
  EXPECT_TRUE(r) << r.error().message;
}

// Whoever reaches the port cannot hold more than max_connections at once; the probes of the
// job's pairs still run once those are gone.
TEST_F(PairProbeTest, ServerConnectionsAreBounded) {
  ProbeServerOptions so;
  so.max_connections = 2;
  auto server = ProbeServer::Listen(io_, "127.0.0.1", 0, so);
  ASSERT_TRUE(server) << server.error().message;
  const uint16_t port = (*server)->port();
  const tcp::endpoint ep(asio::ip::make_address("127.0.0.1"), port);
  tcp::socket a(io_), b(io_), c(io_);
  a.connect(ep);
  b.connect(ep);
  ASSERT_TRUE(RunUntil([&] { return (*server)->accepted() == 2; }));
  c.connect(ep);
  std::array<char, 16> buf;
  bool closed = false;
  c.async_read_some(asio::buffer(buf),
                    [&](const boost::system::error_code& e, size_t) { closed = e.failed(); });
  ASSERT_TRUE(RunUntil([&] { return closed; })) << "the third connection is closed";
  EXPECT_EQ((*server)->rejected(), 1u);
  EXPECT_EQ((*server)->accepted(), 2u);
  a.close();
  b.close();
  ProbeOptions opts;
  opts.bytes = 64 << 10;
  opts.timeout = 3s;
  Result<ProbeResult> r = Error{"not run"};
  ASSERT_TRUE(RunUntil([&] {
    r = Probe(port, opts);
    return r.has_value();
  })) << r.error().message;
}

TEST_F(PairProbeTest, ClientRejectsAServerThatIsNotAProbe) {
  tcp::acceptor acceptor(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  std::optional<tcp::socket> peer;
  std::string junk = "HTTP/1.1 400 Bad Request\r\n\r\n";
  acceptor.async_accept([&](const boost::system::error_code& ec, tcp::socket s) {
    if (ec) return;
    peer = std::move(s);
    asio::async_write(*peer, asio::buffer(junk), [](const boost::system::error_code&, size_t) {});
  });
  ProbeOptions opts;
  opts.timeout = 2s;
  auto r = Probe(acceptor.local_endpoint().port(), opts);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find(": bad reply: bad magic 48545450"), std::string::npos)
      << r.error().message;
}

TEST_F(PairProbeTest, ServerErrorIsReportedByTheClient) {
  ProbeServerOptions so;
  so.max_bytes = 1000;
  auto server = ProbeServer::Listen(io_, "127.0.0.1", 0, so);
  ASSERT_TRUE(server);
  ProbeOptions opts;
  opts.bytes = 4096;
  opts.timeout = 2s;
  auto r = Probe((*server)->port(), opts);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find(
                ": the peer rejected the probe: DATA of 4096 bytes (at most 1000) (during upload)"),
            std::string::npos)
      << r.error().message;
}

TEST_F(PairProbeTest, DestroyingTheClientCancelsWithoutCallingBack) {
  tcp::acceptor acceptor(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  int calls = 0;
  auto client = ProbeClient::Start(io_, "127.0.0.1", acceptor.local_endpoint().port(), {},
                                   [&](Result<ProbeResult>) { ++calls; });
  // Mid-flight: connected, waiting for the PONG the silent peer never sends.
  tcp::socket peer(io_);
  bool accepted = false;
  acceptor.async_accept(peer, [&](const boost::system::error_code& ec) { accepted = !ec; });
  ASSERT_TRUE(RunUntil([&] { return accepted; }));
  client.reset();
  io_.run_for(50ms);
  EXPECT_EQ(calls, 0);
}

// A fork through Boost.Process calls notify_fork on the loop's io_context, which stops
// Asio's resolver thread of that io_context: a lookup queued just before it never completed
// and the probe hung until its timeout. Children spawned while the lookup is pending must
// not hold it up, for a name as for an IP literal.
TEST_F(PairProbeTest, LookupCompletesWhileChildrenAreSpawned) {
  auto server = ProbeServer::Listen(io_, "127.0.0.1", 0);
  ASSERT_TRUE(server) << server.error().message;
  for (const char* host : {"localhost", "127.0.0.1"}) {
    ProbeOptions opts;
    opts.bytes = 0;
    opts.timeout = 60s;  // far beyond RunUntil's deadline: a stranded lookup fails the test
    std::optional<Result<ProbeResult>> got;
    auto client = ProbeClient::Start(io_, host, (*server)->port(), opts,
                                     [&](Result<ProbeResult> r) { got = std::move(r); });
    int exited = 0;
    std::vector<std::unique_ptr<WorkerProcess>> children;
    for (int i = 0; i < 3; ++i) {
      ProcessSpec spec;
      spec.program = "/bin/true";
      auto child = WorkerProcess::Spawn(io_, spec, [&](const ExitStatus&) { ++exited; });
      ASSERT_TRUE(child) << child.error().message;
      children.push_back(std::move(*child));
    }
    ASSERT_TRUE(RunUntil([&] { return got.has_value() && exited == 3; })) << host;
    EXPECT_TRUE(*got) << got->error().message;
  }
}

TEST_F(PairProbeTest, DestroyingTheClientDuringANameLookupCallsNothing) {
  auto server = ProbeServer::Listen(io_, "127.0.0.1", 0);
  ASSERT_TRUE(server) << server.error().message;
  int calls = 0;
  auto client = ProbeClient::Start(io_, "localhost", (*server)->port(), {},
                                   [&](Result<ProbeResult>) { ++calls; });
  client.reset();  // the lookup's thread still runs; its answer must be dropped
  io_.run_for(50ms);
  EXPECT_EQ(calls, 0);
  EXPECT_EQ((*server)->accepted(), 0u);
}

TEST_F(PairProbeTest, ListenErrorsNameTheAddress) {
  auto bad = ProbeServer::Listen(io_, "not-an-ip", 0);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message,
            "netcheck probe server on not-an-ip:0: 'not-an-ip' is not an IP address");
  auto first = ProbeServer::Listen(io_, "127.0.0.1", 0);
  ASSERT_TRUE(first);
  // reuse_address does not allow two listeners on one port.
  auto second = ProbeServer::Listen(io_, "127.0.0.1", (*first)->port());
  ASSERT_FALSE(second);
  EXPECT_NE(second.error().message.find("bind: Address already in use"), std::string::npos)
      << second.error().message;
}

}  // namespace
}  // namespace ftrun::launcher
