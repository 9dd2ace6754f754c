#include "launcher/netcheck/pair_probe.h"

#include <gtest/gtest.h>

#include <array>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <optional>
#include <vector>

#include "launcher/netcheck/probe_wire.h"
#include "launcher/workers/worker_process.h"

namespace ftrun::launcher {
namespace {

using namespace std::chrono_literals;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

// The check's probe key as the rendezvous would give it (32 bytes).
const std::string kKey = "0123456789abcdef0123456789abcdef";

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

  // A probe server on 127.0.0.1 that expects kKey.
  Result<std::unique_ptr<ProbeServer>> Listen(ProbeServerOptions so = {}) {
    auto server = ProbeServer::Listen(io_, "127.0.0.1", 0, so);
    if (server) (*server)->SetKey(kKey);
    return server;
  }

  // Runs one probe to 127.0.0.1:port (with kKey unless opts has a key) and returns its result.
  Result<ProbeResult> Probe(uint16_t port, ProbeOptions opts) {
    if (opts.key.empty()) opts.key = kKey;
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

  // The handshake's KEY message carrying `key`.
  static std::string KeyMessage(const std::string& key) {
    auto h = Header("FTNP", kProbeVersion, 7, key.size());
    return std::string(h.begin(), h.end()) + key;
  }

  // Sends `bytes` to the server raw (after `prefix`: by default the KEY message with kKey)
  // and returns what it answers before hanging up.
  std::string SendRaw(uint16_t port, const std::array<uint8_t, 16>& bytes,
                      std::optional<std::string> prefix = std::nullopt) {
    tcp::socket s(io_);
    boost::system::error_code ec;
    s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port), ec);
    EXPECT_FALSE(ec) << ec.message();
    std::string out = prefix.value_or(KeyMessage(kKey));
    out.append(bytes.begin(), bytes.end());
    asio::write(s, asio::buffer(out), ec);  // small: fits the socket buffer at once
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
  auto server = Listen();
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
  auto server = Listen();
  ASSERT_TRUE(server) << server.error().message;
  uint16_t port = (*server)->port();
  struct Case {
    std::array<uint8_t, 16> bytes;
    std::string reason;
  };
  std::vector<Case> cases = {
      {Header("GET ", 2, 1, 8), "bad magic 47455420 (not an ftrun netcheck probe)"},
      {Header("FTNP", 9, 1, 8), "unsupported probe version 9 (this is 2)"},
      {Header("FTNP", 2, 42, 0), "unexpected message type 42"},
      {Header("FTNP", 2, 1, 1000), "PING of 1000 bytes"},
      {Header("FTNP", 2, 3, uint64_t{1} << 40), "DATA of 1099511627776 bytes (at most 1073741824)"},
      {Header("FTNP", 2, 2, 0), "unexpected message type 2"},  // a PONG from a client
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
  auto server = Listen(so);
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
  auto server = Listen(so);
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
  ProbeOptions opts;
  opts.key = kKey;
  auto client = ProbeClient::Start(io_, "127.0.0.1", acceptor.local_endpoint().port(), opts,
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
  auto server = Listen();
  ASSERT_TRUE(server) << server.error().message;
  for (const char* host : {"localhost", "127.0.0.1"}) {
    ProbeOptions opts;
    opts.bytes = 0;
    opts.timeout = 60s;  // far beyond RunUntil's deadline: a stranded lookup fails the test
    opts.key = kKey;
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

// The handshake's parser reads a KEY header only, and only one of a bounded length: what the
// server then reads is at most kMaxProbeKey bytes.
TEST(ProbeKeyHeader, AcceptsOnlyAKeyOfBoundedLength) {
  using probe_wire::ParseKeyHeader;
  auto h = [](const char magic[4], uint8_t version, uint8_t type, uint64_t length) {
    probe_wire::Header out{};
    for (int i = 0; i < 4; ++i) out[i] = static_cast<uint8_t>(magic[i]);
    out[4] = version;
    out[5] = type;
    for (int i = 0; i < 8; ++i) out[8 + i] = static_cast<uint8_t>(length >> (56 - 8 * i));
    return out;
  };
  auto ok = ParseKeyHeader(h("FTNP", kProbeVersion, probe_wire::kKey, 32));
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ(*ok, 32u);
  EXPECT_TRUE(ParseKeyHeader(h("FTNP", kProbeVersion, probe_wire::kKey, kMinProbeKey)));
  EXPECT_TRUE(ParseKeyHeader(h("FTNP", kProbeVersion, probe_wire::kKey, kMaxProbeKey)));
  struct Case {
    probe_wire::Header header;
    std::string why;
  };
  const std::vector<Case> bad = {
      {h("FTNP", kProbeVersion, probe_wire::kKey, kMinProbeKey - 1),
       "a probe key of the wrong length"},
      {h("FTNP", kProbeVersion, probe_wire::kKey, kMaxProbeKey + 1),
       "a probe key of the wrong length"},
      {h("FTNP", kProbeVersion, probe_wire::kKey, uint64_t{1} << 62),
       "a probe key of the wrong length"},
      {h("FTNP", kProbeVersion, probe_wire::kKey, 0), "a probe key of the wrong length"},
      {h("FTNP", kProbeVersion, probe_wire::kPing, 8), "no probe key first"},
      {h("FTNP", kProbeVersion, probe_wire::kData, 32), "no probe key first"},
      {h("FTNP", 1, probe_wire::kKey, 32), "another probe version"},
      {h("GET ", kProbeVersion, probe_wire::kKey, 32), "not an ftrun netcheck probe"},
  };
  for (const auto& c : bad) {
    auto r = ParseKeyHeader(c.header);
    ASSERT_FALSE(r) << c.why;
    EXPECT_EQ(r.error().message, c.why);
  }
}

// An outsider who reaches the port cannot take part: without the key first, with a key of the
// wrong length or with the wrong key, the connection is refused before anything else is read,
// each with a fixed reason; the check's own probe then measures as before.
TEST_F(PairProbeTest, ServerRefusesConnectionsWithoutTheKey) {
  ProbeServerOptions so;
  so.handshake_timeout = 300ms;
  auto server = Listen(so);
  ASSERT_TRUE(server) << server.error().message;
  const uint16_t port = (*server)->port();
  auto error_of = [](const std::string& reply) {
    if (reply.size() < 16 || reply.substr(0, 4) != "FTNP" || reply[5] != 6) return std::string();
    return reply.substr(16);
  };
  const auto ping = Header("FTNP", kProbeVersion, 1, 8);
  EXPECT_EQ(error_of(SendRaw(port, ping, "")), "no probe key first");
  EXPECT_EQ(error_of(SendRaw(port, ping, KeyMessage("short"))), "a probe key of the wrong length");
  // A 1 TiB "key" is refused from its header, without waiting for its bytes.
  auto huge = Header("FTNP", kProbeVersion, 7, uint64_t{1} << 40);
  EXPECT_EQ(error_of(SendRaw(port, ping, std::string(huge.begin(), huge.end()))),
            "a probe key of the wrong length");
  // A wrong key of the right length: held until the handshake's deadline, then refused.
  const std::string wrong(kKey.size(), 'x');
  EXPECT_EQ(error_of(SendRaw(port, ping, KeyMessage(wrong))), "a wrong probe key");
  EXPECT_EQ((*server)->refused(), 4u);

  // The prober with a wrong key learns why.
  ProbeOptions opts;
  opts.bytes = 64 << 10;
  opts.timeout = 3s;
  opts.key = wrong;
  auto r = Probe(port, opts);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find(": the peer rejected the probe: a wrong probe key"),
            std::string::npos)
      << r.error().message;
  EXPECT_EQ((*server)->refused(), 5u);

  opts.key = kKey;
  auto good = Probe(port, opts);
  ASSERT_TRUE(good) << good.error().message;
  EXPECT_GT(good->upload_mbps, 0);
  EXPECT_GT(good->download_mbps, 0);
  EXPECT_EQ((*server)->refused(), 5u);
}

// A connection that says nothing (or only part of its key) is closed at the handshake's
// deadline, unanswered, long before the connection timeout.
TEST_F(PairProbeTest, SilentConnectionIsClosedAtTheHandshakeDeadline) {
  ProbeServerOptions so;
  so.handshake_timeout = 200ms;
  so.connection_timeout = 60s;
  auto server = Listen(so);
  ASSERT_TRUE(server) << server.error().message;
  const tcp::endpoint ep(asio::ip::make_address("127.0.0.1"), (*server)->port());
  for (const std::string& sent : {std::string(), KeyMessage(kKey).substr(0, 20)}) {
    tcp::socket s(io_);
    s.connect(ep);
    if (!sent.empty()) asio::write(s, asio::buffer(sent));
    std::array<char, 64> buf;
    bool closed = false;
    size_t got = 0;
    s.async_read_some(asio::buffer(buf), [&](const boost::system::error_code& e, size_t n) {
      got = n;
      closed = e.failed();
    });
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(RunUntil([&] { return closed; })) << "bytes sent: " << sent.size();
    EXPECT_EQ(got, 0u);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  }
  EXPECT_EQ((*server)->refused(), 2u);
}

// The listener's order (with the key) may reach it after the client's: a key that arrived
// first is compared again when the server gets its key, within the handshake's deadline.
TEST_F(PairProbeTest, KeySetAfterTheClientConnectedIsAccepted) {
  auto server = ProbeServer::Listen(io_, "127.0.0.1", 0);
  ASSERT_TRUE(server) << server.error().message;
  ProbeOptions opts;
  opts.bytes = 64 << 10;
  opts.timeout = 4s;
  opts.key = kKey;
  std::optional<Result<ProbeResult>> got;
  auto client = ProbeClient::Start(io_, "127.0.0.1", (*server)->port(), opts,
                                   [&](Result<ProbeResult> r) { got = std::move(r); });
  ASSERT_TRUE(RunUntil([&] { return (*server)->accepted() == 1; }));
  io_.run_for(50ms);
  EXPECT_FALSE(got.has_value());  // held: the server has no key yet
  (*server)->SetKey(kKey);
  ASSERT_TRUE(RunUntil([&] { return got.has_value(); }));
  EXPECT_TRUE(*got) << got->error().message;
  EXPECT_EQ((*server)->refused(), 0u);
}

}  // namespace
}  // namespace ftrun::launcher
