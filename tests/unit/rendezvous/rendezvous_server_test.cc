// The gRPC adapter with a real server on 127.0.0.1:<any port>, its loop on a thread, and
// real clients: the normal flow, refusals, garbage, many concurrent agents, cancellation,
// and shutdown with watchers in flight.
#include "rendezvous/rendezvous_server.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <future>
#include <thread>

#include "ftrun/v1/rendezvous.grpc.pb.h"
#include "rendezvous/credentials.h"
#include "rendezvous/rendezvous_client.h"
#include "rendezvous/wire.h"

namespace ftrun::rendezvous {
namespace {

using namespace std::chrono_literals;

class ServerTest : public ::testing::Test {
 protected:
  void Start(JobSpec job, std::string token = "", size_t max_watches_per_peer = 512) {
    ServerOptions so;
    so.listen_host = "127.0.0.1";
    so.job = std::move(job);
    so.token = std::move(token);
    so.max_watches_per_peer = max_watches_per_peer;
    server_ = std::make_unique<RendezvousServer>(io_, so);
    auto port = server_->Start();
    ASSERT_TRUE(port) << port.error().message;
    port_ = *port;
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
  static JobSpec Spec(int min, int max, int max_restarts = 0) {
    JobSpec s;
    s.run_id = "job";
    s.min_nodes = min;
    s.max_nodes = max;
    s.max_restarts = max_restarts;
    s.last_call_timeout = 100ms;
    s.disconnect_grace = 200ms;
    s.fault_save = false;
    return s;
  }
  std::unique_ptr<v1::Rendezvous::Stub> Stub() {
    return v1::Rendezvous::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port_),
                                                       grpc::InsecureChannelCredentials()));
  }
  static v1::RequestHeader Header(const std::string& node, const std::string& token = "") {
    v1::RequestHeader h;
    h.set_protocol_version(kProtocolVersion);
    h.set_run_id("job");
    h.set_node_id(node);
    h.set_token(token);
    // Each test node's own credential (bound by its first Join).
    h.set_node_secret(node + ":secret-0123456789");
    return h;
  }
  static v1::JoinRequest JoinReq(const std::string& node, int nproc = 2) {
    v1::JoinRequest r;
    *r.mutable_header() = Header(node);
    r.mutable_node()->set_host(node + ".host");
    r.mutable_node()->set_addr(node + ".addr");
    r.mutable_node()->set_nproc_per_node(nproc);
    r.mutable_node()->set_node_rank(-1);
    r.mutable_node()->set_free_port(1234);
    return r;
  }
  grpc::Status Join(v1::Rendezvous::Stub& stub, const v1::JoinRequest& req,
                    v1::JoinResponse* resp = nullptr) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 5s);
    v1::JoinResponse ignored;
    return stub.Join(&ctx, req, resp ? resp : &ignored);
  }
  v1::WatchResponse Watch(v1::Rendezvous::Stub& stub, const std::string& node, uint64_t known,
                          grpc::Status* status = nullptr) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    v1::WatchRequest req;
    *req.mutable_header() = Header(node);
    req.set_known_version(known);
    req.set_wait_ms(5000);
    v1::WatchResponse resp;
    grpc::Status s = stub.Watch(&ctx, req, &resp);
    if (status) *status = s;
    return resp;
  }
  // The addresses of the job's nodes, as Status reports them.
  std::vector<std::string> Addrs(v1::Rendezvous::Stub& stub) {
    grpc::ClientContext ctx;
    v1::StatusRequest req;
    *req.mutable_header() = Header("");
    v1::JobStatus s;
    EXPECT_TRUE(stub.Status(&ctx, req, &s).ok());
    std::vector<std::string> out;
    for (const auto& n : s.nodes()) out.push_back(n.addr());
    return out;
  }
  // Waits (up to 10 s) until `n` Watch calls are pending on the server; asks its loop.
  bool WaitForPendingWatches(size_t n) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < deadline) {
      std::promise<size_t> count;
      boost::asio::post(io_, [&] { count.set_value(server_->pending_watches()); });
      if (count.get_future().get() == n) return true;
      std::this_thread::yield();
    }
    return false;
  }

  boost::asio::io_context io_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_{
      io_.get_executor()};
  std::unique_ptr<RendezvousServer> server_;
  int port_ = 0;
  std::thread loop_;
};

TEST_F(ServerTest, JoinWatchReportFlow) {
  Start(Spec(2, 2));
  auto stub = Stub();
  v1::JoinResponse ja;
  ASSERT_TRUE(Join(*stub, JoinReq("a"), &ja).ok());
  EXPECT_EQ(ja.view().phase(), v1::PHASE_FORMING);
  // a's watch is answered when b's join completes the round.
  auto watch =
      std::async(std::launch::async, [&] { return Watch(*stub, "a", ja.view().version()); });
  ASSERT_TRUE(Join(*stub, JoinReq("b")).ok());
  v1::WatchResponse wa = watch.get();
  EXPECT_EQ(wa.view().phase(), v1::PHASE_RUNNING);
  EXPECT_EQ(wa.view().assignment().group_rank(), 0);
  EXPECT_EQ(wa.view().assignment().world_size(), 4);
  for (const char* node : {"a", "b"}) {
    grpc::ClientContext ctx;
    v1::ReportRequest rep;
    *rep.mutable_header() = Header(node);
    rep.set_kind(v1::ReportRequest::KIND_SUCCEEDED);
    rep.set_round(0);
    v1::ReportResponse resp;
    ASSERT_TRUE(stub->Report(&ctx, rep, &resp).ok());
  }
  EXPECT_EQ(Watch(*stub, "a", wa.view().version()).view().phase(), v1::PHASE_SUCCEEDED);
}

TEST_F(ServerTest, RefusalsNameTheProblemAndTheServerCarriesOn) {
  Start(Spec(2, 2), "s3cret");
  auto stub = Stub();
  auto req = JoinReq("a");
  auto status = Join(*stub, req);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(status.error_message(), "missing or wrong job token");
  req.mutable_header()->set_token("s3cret");
  // A newer client and one older than the oldest version spoken: one message naming both.
  req.mutable_header()->set_protocol_version(kProtocolVersion + 1);
  status = Join(*stub, req);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  const std::string newer = std::to_string(kProtocolVersion + 1);
  const std::string mine = std::to_string(kProtocolVersion);
  EXPECT_EQ(status.error_message().rfind("this client speaks rendezvous protocol version " + newer +
                                             ", newer than this server's " + mine + ":",
                                         0),
            0u)
      << status.error_message();
  req.mutable_header()->set_protocol_version(1);
  status = Join(*stub, req);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(
      status.error_message().rfind("this client speaks rendezvous protocol version 1, "
                                   "older than the oldest this server speaks (2; its own is " +
                                       mine + ")",
                                   0),
      0u)
      << status.error_message();
  req.mutable_header()->set_protocol_version(kProtocolVersion);
  req.mutable_header()->set_run_id("other");
  status = Join(*stub, req);
  EXPECT_EQ(status.error_message(), "run id 'other' differs from the server's 'job'");
  req.mutable_header()->set_run_id("job");
  req.mutable_header()->set_node_id("");
  EXPECT_EQ(Join(*stub, req).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  req.mutable_header()->set_node_id("a");
  req.mutable_node()->set_nproc_per_node(0);
  EXPECT_EQ(Join(*stub, req).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  req.mutable_node()->set_nproc_per_node(2);
  req.mutable_node()->set_min_nodes(1);
  req.mutable_node()->set_max_nodes(3);
  status = Join(*stub, req);
  EXPECT_EQ(status.error_message(), "--nnodes 1:3 on a.host differs from the server's 2:2");
  req.mutable_node()->set_max_nodes(0);

  // Reports from strangers, unknown kinds and oversized ones.
  grpc::ClientContext c1;
  v1::ReportRequest rep;
  *rep.mutable_header() = Header("nobody", "s3cret");
  rep.set_kind(v1::ReportRequest::KIND_SUCCEEDED);
  v1::ReportResponse resp;
  EXPECT_EQ(stub->Report(&c1, rep, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  ASSERT_TRUE(Join(*stub, req).ok());
  grpc::ClientContext c2;
  *rep.mutable_header() = Header("a", "s3cret");
  rep.set_kind(static_cast<v1::ReportRequest::Kind>(42));
  EXPECT_EQ(stub->Report(&c2, rep, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  grpc::ClientContext c3;
  rep.set_kind(v1::ReportRequest::KIND_FAILED);
  for (int i = 0; i < 65; ++i) rep.add_failures()->set_rank(i);
  EXPECT_EQ(stub->Report(&c3, rep, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  grpc::ClientContext c4;
  rep.clear_failures();
  rep.add_failures()->set_message(std::string(kMaxText + 1, 'x'));
  EXPECT_EQ(stub->Report(&c4, rep, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // Still serving.
  auto b = JoinReq("b");
  b.mutable_header()->set_token("s3cret");
  v1::JoinResponse jb;
  ASSERT_TRUE(Join(*stub, b, &jb).ok());
  EXPECT_EQ(jb.view().phase(), v1::PHASE_RUNNING);
}

// While a restarted server rebuilds the round, a report is answered ABORTED ("send again"),
// except to a version-2 agent, which ends its job on ABORTED: it is told UNAVAILABLE and
// retries it as an outage. A version-2 agent is served otherwise.
TEST_F(ServerTest, AVersion2AgentIsToldUnavailableWhileTheRoundIsRebuilt) {
  Start(Spec(2, 3));
  auto stub = Stub();
  auto claim = JoinReq("a");
  v1::Assignment* a = claim.mutable_node()->mutable_running();
  a->set_round(5);
  a->set_group_rank(0);
  a->set_group_world_size(2);
  a->set_world_size(4);
  a->set_master_addr("a.addr");
  a->set_master_port(1234);
  ASSERT_TRUE(Join(*stub, claim).ok());
  auto old = JoinReq("c");
  old.mutable_header()->set_protocol_version(2);
  v1::JoinResponse jc;
  ASSERT_TRUE(Join(*stub, old, &jc).ok()) << "a version-2 agent joins";
  EXPECT_EQ(jc.view().phase(), v1::PHASE_FORMING);
  auto report = [&](const std::string& node, uint32_t version) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 5s);
    v1::ReportRequest rep;
    *rep.mutable_header() = Header(node);
    rep.mutable_header()->set_protocol_version(version);
    rep.set_round(5);
    rep.set_kind(v1::ReportRequest::KIND_SUCCEEDED);
    v1::ReportResponse resp;
    return stub->Report(&ctx, rep, &resp);
  };
  grpc::Status s = report("c", 2);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_NE(s.error_message().find("rebuilding round 5"), std::string::npos) << s.error_message();
  s = report("c", kProtocolVersion);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ABORTED) << s.error_message();
  s = report("a", kProtocolVersion);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ABORTED) << s.error_message();
}

TEST_F(ServerTest, GarbageOnThePortDoesNotHurt) {
  Start(Spec(1, 1));
  const std::vector<std::string> junks = {
      "GET / HTTP/1.1\r\n\r\n", std::string(100000, '\xff'),
      std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") + std::string(64, '\x01')};
  for (const std::string& junk : junks) {
    boost::asio::io_context io;
    boost::asio::ip::tcp::socket s(io);
    s.connect({boost::asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port_)});
    boost::system::error_code ec;
    boost::asio::write(s, boost::asio::buffer(junk), ec);
  }
  auto stub = Stub();
  EXPECT_TRUE(Join(*stub, JoinReq("a")).ok());
}

TEST_F(ServerTest, ManyConcurrentAgentsFormOneRound) {
  constexpr int kNodes = 64;
  Start(Spec(kNodes, kNodes));
  std::vector<std::future<v1::WatchResponse>> results;
  for (int i = 0; i < kNodes; ++i) {
    results.push_back(std::async(std::launch::async, [this, i] {
      auto stub = Stub();
      v1::JoinResponse j;
      EXPECT_TRUE(Join(*stub, JoinReq("n" + std::to_string(i)), &j).ok());
      if (j.view().phase() == v1::PHASE_RUNNING) {
        v1::WatchResponse w;
        *w.mutable_view() = j.view();
        return w;
      }
      return Watch(*stub, "n" + std::to_string(i), j.view().version());
    }));
  }
  std::set<int> ranks;
  for (auto& f : results) {
    auto w = f.get();
    EXPECT_EQ(w.view().phase(), v1::PHASE_RUNNING);
    EXPECT_EQ(w.view().assignment().world_size(), 2 * kNodes);
    ranks.insert(w.view().assignment().group_rank());
  }
  EXPECT_EQ(ranks.size(), static_cast<size_t>(kNodes));
}

// A node that dies just after its watch was answered leaves no call for the transport to
// cancel: it is found by not watching again, long before the liveness timeout's silence.
TEST_F(ServerTest, ANodeThatDoesNotWatchAgainAfterAnAnswerIsLost) {
  JobSpec spec = Spec(1, 2);
  spec.liveness_timeout = 60s;
  Start(spec);
  auto stub = Stub();
  ASSERT_TRUE(Join(*stub, JoinReq("a")).ok());
  ASSERT_TRUE(Join(*stub, JoinReq("b")).ok());
  v1::WatchResponse w = Watch(*stub, "a", 0);
  ASSERT_EQ(w.view().phase(), v1::PHASE_RUNNING);
  ASSERT_EQ(Watch(*stub, "b", 0).view().phase(), v1::PHASE_RUNNING);  // b's last call
  // a keeps watching, as a live agent does; b never calls again.
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (w.view().phase() == v1::PHASE_RUNNING && std::chrono::steady_clock::now() < deadline) {
    w = Watch(*stub, "a", w.view().version());
  }
  EXPECT_EQ(w.view().phase(), v1::PHASE_STOPPING);
  EXPECT_NE(w.view().reason().find("b.host lost (disconnected: no call within 5s of its last "
                                   "answer)"),
            std::string::npos)
      << w.view().reason();
}

TEST_F(ServerTest, CancelledWatchMakesTheNodeLost) {
  Start(Spec(1, 2));
  auto stub = Stub();
  ASSERT_TRUE(Join(*stub, JoinReq("a")).ok());
  ASSERT_TRUE(Join(*stub, JoinReq("b")).ok());
  v1::WatchResponse w = Watch(*stub, "a", 0);
  ASSERT_EQ(w.view().phase(), v1::PHASE_RUNNING);
  {
    // b's watch is cut off by the transport, as when its agent dies.
    grpc::ClientContext ctx;
    v1::WatchRequest req;
    *req.mutable_header() = Header("b");
    req.set_known_version(1 << 30);
    req.set_wait_ms(5000);
    v1::WatchResponse resp;
    std::thread cancel([&] {
      EXPECT_TRUE(WaitForPendingWatches(1));
      ctx.TryCancel();
    });
    stub->Watch(&ctx, req, &resp);
    cancel.join();
  }
  // a keeps watching: the round stops because b is lost.
  auto next = Watch(*stub, "a", w.view().version());
  EXPECT_EQ(next.view().phase(), v1::PHASE_STOPPING);
  EXPECT_NE(next.view().reason().find("b.host lost (disconnected)"), std::string::npos)
      << next.view().reason();
}

TEST_F(ServerTest, ShutdownAnswersWatchersInFlight) {
  Start(Spec(2, 2));
  auto stub = Stub();
  v1::JoinResponse j;
  ASSERT_TRUE(Join(*stub, JoinReq("a"), &j).ok());
  auto watch = std::async(std::launch::async, [&] {
    grpc::Status s;
    Watch(*stub, "a", j.view().version(), &s);
    return s;
  });
  ASSERT_TRUE(WaitForPendingWatches(1));
  std::promise<void> stopped;
  boost::asio::post(io_, [&] { server_->Shutdown([&] { stopped.set_value(); }); });
  ASSERT_EQ(stopped.get_future().wait_for(10s), std::future_status::ready);
  EXPECT_EQ(watch.wait_for(10s), std::future_status::ready);
  server_.reset();
}

// Per-node credentials (issue 17): a forged Join for a member's id changes nothing.
TEST_F(ServerTest, AForgedJoinDoesNotOverwriteAMember) {
  Start(Spec(2, 2));
  auto stub = Stub();
  auto req = JoinReq("a");
  req.mutable_header()->clear_node_secret();
  v1::JoinResponse resp;
  ASSERT_TRUE(Join(*stub, req, &resp).ok());
  const std::string issued = resp.node_secret();
  EXPECT_GE(issued.size(), kMinSecretBytes) << "a Join without a secret gets one issued";
  auto forged = req;
  forged.mutable_node()->set_addr("10.6.6.6");
  for (const std::string& guess :
       {std::string(), std::string("wrong-wrong-wrong-wrong"), issued + "x"}) {
    forged.mutable_header()->set_node_secret(guess);
    EXPECT_EQ(Join(*stub, forged).error_code(), grpc::StatusCode::PERMISSION_DENIED) << guess;
  }
  EXPECT_EQ(Addrs(*stub), std::vector<std::string>{"a.addr"});
  // The member itself may join again (a retry, a fresh port) with its secret.
  req.mutable_header()->set_node_secret(issued);
  req.mutable_node()->set_addr("a.addr2");
  ASSERT_TRUE(Join(*stub, req, &resp).ok());
  EXPECT_EQ(resp.node_secret(), issued);
  EXPECT_EQ(Addrs(*stub), std::vector<std::string>{"a.addr2"});
}

TEST_F(ServerTest, TheAgentsOwnSecretMakesItsJoinRetriesIdempotent) {
  Start(Spec(2, 2));
  auto stub = Stub();
  v1::JoinResponse first, retry;
  ASSERT_TRUE(Join(*stub, JoinReq("a"), &first).ok());
  EXPECT_EQ(first.node_secret(), JoinReq("a").header().node_secret());
  ASSERT_TRUE(Join(*stub, JoinReq("a"), &retry).ok()) << "as if the first answer was lost";
}

TEST_F(ServerTest, OneWatchPerNodeAndAPerPeerCap) {
  Start(Spec(2, 2), "", /*max_watches_per_peer=*/2);
  auto stub = Stub();
  for (const char* n : {"p", "q", "r"}) ASSERT_TRUE(Join(*stub, JoinReq(n)).ok());
  auto watch = [&](const std::string& node) {
    return std::async(std::launch::async, [&, node] {
      grpc::Status s;
      Watch(*stub, node, 1u << 30, &s);
      return s;
    });
  };
  auto w1 = watch("p");
  ASSERT_TRUE(WaitForPendingWatches(1));
  auto w2 = watch("p");  // the same node again: the older one is answered at once
  EXPECT_EQ(w1.get().error_code(), grpc::StatusCode::OK);
  ASSERT_TRUE(WaitForPendingWatches(1));
  auto w3 = watch("q");
  ASSERT_TRUE(WaitForPendingWatches(2));
  auto refused = watch("r").get();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(refused.error_message().find("limit per address"), std::string::npos);
  EXPECT_EQ(w2.get().error_code(), grpc::StatusCode::OK);
  EXPECT_EQ(w3.get().error_code(), grpc::StatusCode::OK);
}

TEST_F(ServerTest, AnOversizedRequestIsRefusedAsResourceExhausted) {
  Start(Spec(2, 2));
  auto stub = Stub();
  ASSERT_TRUE(Join(*stub, JoinReq("a")).ok());
  grpc::ClientContext ctx;
  v1::ReportRequest rep;
  *rep.mutable_header() = Header("a");
  rep.set_kind(v1::ReportRequest::KIND_SUCCEEDED);
  rep.set_error(std::string(kMaxRequestBytes + 1, 'x'));
  v1::ReportResponse resp;
  EXPECT_EQ(stub->Report(&ctx, rep, &resp).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(Join(*stub, JoinReq("a")).ok()) << "still serving";
}

}  // namespace
}  // namespace ftrun::rendezvous
