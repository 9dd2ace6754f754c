// Per-node credentials, the job token, bounded logging of peer text, the watch caps and the
// joiner's claims: the pure helpers, and a real server on 127.0.0.1 with raw stubs.
#include "rendezvous/credentials.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <fstream>
#include <future>
#include <thread>

#include "ftrun/v1/rendezvous.grpc.pb.h"
#include "rendezvous/rendezvous_server.h"
#include "rendezvous/wire.h"

namespace ftrun::rendezvous {
namespace {

using namespace std::chrono_literals;

TEST(Credentials, NewSecretsAre128RandomBits) {
  const std::string a = NewSecret(), b = NewSecret();
  EXPECT_EQ(a.size(), 32u);
  EXPECT_NE(a, b);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
}

TEST(Credentials, SecretsEqualComparesWholeValues) {
  EXPECT_TRUE(SecretsEqual("abc", "abc"));
  EXPECT_FALSE(SecretsEqual("abc", "abd"));
  EXPECT_FALSE(SecretsEqual("abc", "abcd"));
  EXPECT_FALSE(SecretsEqual("", "x"));
  EXPECT_TRUE(SecretsEqual("", ""));
}

TEST(Credentials, PrintableEscapesAndBounds) {
  EXPECT_EQ(Printable("node-1"), "node-1");
  EXPECT_EQ(Printable("a\nb\x1b[31m"), "a\\x0ab\\x1b[31m");
  EXPECT_EQ(Printable(std::string(100, 'x'), 10), std::string(10, 'x') + "...(+90 bytes)");
}

TEST(Credentials, HeaderChecksNeverAcceptControlCharacters) {
  v1::RequestHeader h;
  h.set_node_id("ok:1:2");
  EXPECT_TRUE(CheckHeader(h));
  h.set_node_id("evil\nrejected join from node=x");
  EXPECT_FALSE(CheckHeader(h));
  h.set_node_id(std::string(kMaxNodeId + 1, 'n'));
  EXPECT_FALSE(CheckHeader(h));
  h.set_node_id("n");
  h.set_node_secret(std::string(kMaxSecretBytes + 1, 's'));
  EXPECT_FALSE(CheckHeader(h));
  v1::NodeInfo n;
  n.set_nproc_per_node(1);
  n.set_host("host\r\nfake line");
  EXPECT_FALSE(CheckLimits(n));
}

TEST(Credentials, TokenFromOptionFileOrEnvironmentInThatOrder) {
  const std::string file = ::testing::TempDir() + "/ftrun_token_test";
  std::ofstream(file) << "from-file\n\n";
  RendezvousConf conf;
  EXPECT_EQ(ResolveSecurity(conf, {})->token, "");
  EXPECT_EQ(ResolveSecurity(conf, {{"FTRUN_RDZV_TOKEN_FILE", file}})->token, "from-file");
  EXPECT_EQ(
      ResolveSecurity(conf, {{"FTRUN_RDZV_TOKEN", "env"}, {"FTRUN_RDZV_TOKEN_FILE", file}})->token,
      "env");
  conf.token_file = file;
  EXPECT_EQ(ResolveSecurity(conf, {{"FTRUN_RDZV_TOKEN", "env"}})->token, "from-file");
  conf.token = "option";
  EXPECT_EQ(ResolveSecurity(conf, {})->token, "option");
  RendezvousConf missing;
  missing.token_file = file + ".absent";
  auto r = ResolveSecurity(missing, {});
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("token_file"), std::string::npos) << r.error().message;
  RendezvousConf half;
  half.tls_client_auth = true;
  EXPECT_FALSE(ResolveSecurity(half, {}));
}

TEST(Credentials, RendezvousConfTakesTheSecurityKeys) {
  auto c = ParseRendezvousConf("token_file=/t,tls_cert=/c,tls_key=/k,tls_ca=/a,tls_client_auth=1");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->token_file, "/t");
  EXPECT_EQ(c->tls_cert, "/c");
  EXPECT_EQ(c->tls_key, "/k");
  EXPECT_EQ(c->tls_ca, "/a");
  EXPECT_TRUE(c->tls_client_auth);
  EXPECT_TRUE(c->warnings.empty());
}

TEST(Credentials, AJoinersClaimsAreBoundedAndTakenOnlyBeforeTheFirstRound) {
  JobSpec spec;
  spec.min_nodes = spec.max_nodes = 2;
  spec.max_restarts = 3;
  const TimePoint t0{};
  RendezvousState s(spec, t0);
  NodeInfo a;
  a.node_id = "a";
  a.nproc_per_node = 1;
  a.next_round = ~uint64_t{0} - 1;
  a.restart_count = 1 << 30;
  ASSERT_FALSE(s.Join(a, t0));
  EXPECT_LE(s.View("a").restart_count, 3) << "a claim cannot spend more than --max-restarts";
  EXPECT_LE(s.round(), 1'000'000u);
  NodeInfo b = a;
  b.node_id = "b";
  b.next_round = 0;
  b.restart_count = 0;
  ASSERT_FALSE(s.Join(b, t0));
  const uint64_t formed = s.round();
  ASSERT_EQ(s.phase(), Phase::kRunning);
  s.Leave("b", t0);
  NodeInfo c = a;
  c.node_id = "c";
  c.next_round = formed + 100;
  ASSERT_FALSE(s.Join(c, t0));
  EXPECT_LE(s.round(), formed + 1) << "after a round formed, claims are ignored";
}

// A real server and raw stubs.
class CredentialServer : public ::testing::Test {
 protected:
  void Start(ServerOptions so = {}) {
    so.listen_host = "127.0.0.1";
    so.job.run_id = "job";
    so.job.min_nodes = so.job.max_nodes = 2;
    so.job.last_call_timeout = 100ms;
    so.job.fault_save = false;
    server_ = std::make_unique<RendezvousServer>(io_, so);
    auto port = server_->Start();
    ASSERT_TRUE(port) << port.error().message;
    stub_ = v1::Rendezvous::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(*port),
                                                        grpc::InsecureChannelCredentials()));
    loop_ = std::thread([this] { io_.run(); });
  }
  void TearDown() override {
    if (server_) {
      std::promise<void> stopped;
      boost::asio::post(io_, [&] { server_->Shutdown([&] { stopped.set_value(); }); });
      ASSERT_EQ(stopped.get_future().wait_for(10s), std::future_status::ready);
    }
    work_.reset();
    if (loop_.joinable()) loop_.join();
  }
  static v1::RequestHeader Header(const std::string& node, const std::string& secret) {
    v1::RequestHeader h;
    h.set_protocol_version(kProtocolVersion);
    h.set_run_id("job");
    h.set_node_id(node);
    h.set_node_secret(secret);
    return h;
  }
  grpc::Status Join(const std::string& node, const std::string& secret, const std::string& addr,
                    v1::JoinResponse* resp) {
    v1::JoinRequest r;
    *r.mutable_header() = Header(node, secret);
    r.mutable_node()->set_addr(addr);
    r.mutable_node()->set_host(node);
    r.mutable_node()->set_nproc_per_node(1);
    r.mutable_node()->set_node_rank(-1);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 5s);
    return stub_->Join(&ctx, r, resp);
  }
  v1::JobStatus Status() {
    v1::StatusRequest r;
    *r.mutable_header() = Header("", "");
    grpc::ClientContext ctx;
    v1::JobStatus s;
    EXPECT_TRUE(stub_->Status(&ctx, r, &s).ok());
    return s;
  }
  // A watch for `node` with a long wait, in flight on a thread of its own.
  std::future<grpc::Status> Watch(const std::string& node, const std::string& secret) {
    return std::async(std::launch::async, [this, node, secret] {
      v1::WatchRequest r;
      *r.mutable_header() = Header(node, secret);
      r.set_known_version(1u << 30);
      r.set_wait_ms(3000);
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + 10s);
      v1::WatchResponse resp;
      return stub_->Watch(&ctx, r, &resp);
    });
  }
  size_t Pending() {
    std::promise<size_t> n;
    boost::asio::post(io_, [&] { n.set_value(server_->pending_watches()); });
    return n.get_future().get();
  }
  bool WaitPending(size_t n) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < deadline) {
      if (Pending() == n) return true;
      std::this_thread::sleep_for(5ms);
    }
    return false;
  }

  boost::asio::io_context io_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_{
      io_.get_executor()};
  std::unique_ptr<RendezvousServer> server_;
  std::unique_ptr<v1::Rendezvous::Stub> stub_;
  std::thread loop_;
};

TEST_F(CredentialServer, AForgedJoinDoesNotOverwriteAMember) {
  Start();
  v1::JoinResponse resp;
  ASSERT_TRUE(Join("a", "", "10.0.0.1", &resp).ok());
  const std::string issued = resp.node_secret();
  EXPECT_GE(issued.size(), kMinSecretBytes) << "a Join without a secret gets one issued";
  for (const std::string& guess :
       {std::string(), std::string("wrong-wrong-wrong-wrong"), issued + "x"}) {
    auto s = Join("a", guess, "10.6.6.6", &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << guess;
  }
  EXPECT_EQ(Status().nodes(0).addr(), "10.0.0.1");
  // The member itself may join again (a retry, a fresh port) with its secret.
  ASSERT_TRUE(Join("a", issued, "10.0.0.2", &resp).ok());
  EXPECT_EQ(resp.node_secret(), issued);
  EXPECT_EQ(Status().nodes(0).addr(), "10.0.0.2");
}

TEST_F(CredentialServer, TheAgentsOwnSecretMakesItsJoinRetriesIdempotent) {
  Start();
  const std::string mine = NewSecret();
  v1::JoinResponse first, retry;
  ASSERT_TRUE(Join("a", mine, "10.0.0.1", &first).ok());
  EXPECT_EQ(first.node_secret(), mine);
  ASSERT_TRUE(Join("a", mine, "10.0.0.1", &retry).ok()) << "the answer to the first was lost";
}

TEST_F(CredentialServer, OneWatchPerNodeAndAPerPeerCap) {
  ServerOptions so;
  so.max_watches_per_peer = 2;
  Start(so);
  v1::JoinResponse resp;
  const std::string sa = NewSecret(), sb = NewSecret(), sc = NewSecret();
  ASSERT_TRUE(Join("p", sa, "x", &resp).ok());
  ASSERT_TRUE(Join("q", sb, "x", &resp).ok());
  ASSERT_TRUE(Join("r", sc, "x", &resp).ok());
  auto w1 = Watch("p", sa);
  ASSERT_TRUE(WaitPending(1));
  auto w2 = Watch("p", sa);  // the same node again: the older is answered
  EXPECT_EQ(w1.get().error_code(), grpc::StatusCode::OK);
  ASSERT_TRUE(WaitPending(1));
  auto w3 = Watch("q", sb);
  ASSERT_TRUE(WaitPending(2));
  auto refused = Watch("r", sc).get();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(refused.error_message().find("limit per address"), std::string::npos);
  EXPECT_EQ(w2.get().error_code(), grpc::StatusCode::OK);
  EXPECT_EQ(w3.get().error_code(), grpc::StatusCode::OK);
}

}  // namespace
}  // namespace ftrun::rendezvous
