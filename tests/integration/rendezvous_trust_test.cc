// Who can steer a job (issue 17): real ftrun agents on loopback, and an outsider that makes
// calls in their names with its own gRPC stub. Every forged call must be refused and the
// job must end as it would have without the outsider. Also: the server listens only on the
// endpoint's address, and the token is required on every call, Status included.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <fstream>

#include "ftrun/v1/rendezvous.grpc.pb.h"
#include "launcher/config/host.h"
#include "rendezvous/wire.h"
#include "tests/integration/rendezvous_job.h"
#include "tests/support/test_support.h"

namespace ftrun::testing {
namespace {

using namespace std::chrono_literals;
namespace v1 = ftrun::v1;

class RendezvousTrust : public ::testing::Test {
 protected:
  void SetUp() override { port_ = std::to_string(TestPort()); }

  std::vector<std::string> Agent(const std::string& endpoint_host, const std::string& conf) {
    return TwoNodeAgent(dir_, endpoint_host + ":" + port_, std::string(kFastConf) + conf);
  }
  int Count(const std::string& needle) { return CountRecords(dir_, needle); }
  std::unique_ptr<v1::Rendezvous::Stub> Stub(const std::string& host = "127.0.0.1") {
    return v1::Rendezvous::NewStub(
        grpc::CreateChannel(host + ":" + port_, grpc::InsecureChannelCredentials()));
  }
  static v1::RequestHeader Header(const std::string& node, const std::string& secret,
                                  const std::string& token) {
    return OutsiderHeader(node, secret, token);
  }
  static std::unique_ptr<grpc::ClientContext> Ctx() {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + 5s);
    return ctx;
  }
  grpc::Status Status(v1::Rendezvous::Stub& stub, const std::string& token, v1::JobStatus* out) {
    v1::StatusRequest req;
    *req.mutable_header() = Header("", "", token);
    return stub.Status(Ctx().get(), req, out);
  }

  // Every call an outsider can make in `node`'s name, with no secret and with a guessed one;
  // returns how many the server accepted.
  int ForgeAll(v1::Rendezvous::Stub& stub, const std::string& node, uint64_t round,
               const std::string& token, int* made) {
    int accepted = 0;
    for (const std::string secret : {"", "0123456789abcdef0123456789abcdef"}) {
      auto count = [&](const grpc::Status& s, const char* what) {
        ++*made;
        if (s.ok()) {
          ++accepted;
          ADD_FAILURE() << what << " in the name of " << node << " was accepted";
        } else {
          EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED)
              << what << ": " << s.error_message();
        }
      };
      v1::JoinRequest join;
      *join.mutable_header() = Header(node, secret, token);
      join.mutable_node()->set_addr("10.66.66.66");
      join.mutable_node()->set_host("outsider");
      join.mutable_node()->set_nproc_per_node(1);
      join.mutable_node()->set_node_rank(-1);
      join.mutable_node()->set_free_port(6666);
      v1::JoinResponse join_resp;
      count(stub.Join(Ctx().get(), join, &join_resp), "Join");
      for (auto kind : {v1::ReportRequest::KIND_FAILED, v1::ReportRequest::KIND_SUCCEEDED,
                        v1::ReportRequest::KIND_STOPPED}) {
        v1::ReportRequest r;
        *r.mutable_header() = Header(node, secret, token);
        r.set_round(round);
        r.set_kind(kind);
        auto* f = r.add_failures();
        f->set_rank(0);
        f->set_exitcode(1);
        f->set_host("outsider");
        v1::ReportResponse resp;
        count(stub.Report(Ctx().get(), r, &resp), "Report");
      }
      v1::WatchRequest w;
      *w.mutable_header() = Header(node, secret, token);
      w.set_known_version(1u << 30);
      w.set_wait_ms(100);
      v1::WatchResponse wresp;
      count(stub.Watch(Ctx().get(), w, &wresp), "Watch (keep-alive)");
      v1::LeaveRequest l;
      *l.mutable_header() = Header(node, secret, token);
      v1::LeaveResponse lresp;
      count(stub.Leave(Ctx().get(), l, &lresp), "Leave");
    }
    return accepted;
  }

  // Runs a 2-node job, forges every call against both members while it runs, then lets it
  // finish; the job must succeed in its first attempt with its members' own addresses.
  void OutsiderCannotSteer(const std::string& conf, const std::string& outsider_token) {
    ChildRun a(FtrunBinary(), Agent("127.0.0.1", conf));
    ChildRun b(FtrunBinary(), Agent("127.0.0.1", conf));
    ASSERT_TRUE(WaitFor([&] { return Count("attempt=0") == 2; }, 30s)) << a.Err() << b.Err();
    auto stub = Stub();
    v1::JobStatus before;
    // The outsider learns the node ids as an operator would (`ftrun status`); with a token it
    // cannot, and uses the ids from the agents' logs instead.
    std::vector<std::string> nodes;
    if (outsider_token.empty() && conf.find("token") == std::string::npos) {
      ASSERT_TRUE(Status(*stub, "", &before).ok());
      for (const auto& n : before.nodes()) nodes.push_back(n.node_id());
    } else {
      auto s = Status(*stub, outsider_token, &before);
      EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << "Status needs the token";
      for (const auto* err : {&a, &b}) {
        const std::string text = err->Err();
        const auto at = text.find("node_id=");
        ASSERT_NE(at, std::string::npos) << text;
        nodes.push_back(text.substr(at + 8, text.find(' ', at) - at - 8));
      }
    }
    ASSERT_EQ(nodes.size(), 2u);
    int made = 0, accepted = 0;
    for (const auto& n : nodes) accepted += ForgeAll(*stub, n, 1, outsider_token, &made);
    EXPECT_EQ(accepted, 0) << "of " << made << " forged calls";
    RecordProperty("forged_calls", made);
    RecordProperty("forged_calls_accepted", accepted);
    std::ofstream(dir_ / "done") << "";
    auto ra = a.Wait(30s), rb = b.Wait(30s);
    EXPECT_EQ(ra.exit_code, 0) << ra.err;
    EXPECT_EQ(rb.exit_code, 0) << rb.err;
    EXPECT_EQ(Count("attempt=0"), 2) << ReadFile(dir_ / "records");
    EXPECT_EQ(Count("attempt=1"), 0) << "a forged report spent a restart";
    for (const auto* err : {&ra.err, &rb.err}) {
      EXPECT_EQ(err->find("10.66.66.66"), std::string::npos) << *err;
      EXPECT_EQ(err->find("node_left"), std::string::npos) << *err;
    }
  }

  static constexpr const char* kFastConf =
      "last_call_timeout=0.5,keep_alive_interval=0.5,keep_alive_max_attempt=6";
  TempDir dir_;
  std::string port_;
};

TEST_F(RendezvousTrust, WithoutATokenAnOutsiderCannotSpeakForAMember) {
  OutsiderCannotSteer("", "");
}

TEST_F(RendezvousTrust, WithATokenEveryCallOfAnOutsiderIsRefused) {
  OutsiderCannotSteer(",token=s3cret", "guess");
}

TEST_F(RendezvousTrust, TokenFromAFileAndStatusNeedsIt) {
  { std::ofstream(dir_ / "token") << "from-a-file\n"; }
  ChildRun a(FtrunBinary(), Agent("127.0.0.1", ",token_file=" + dir_ / "token"));
  ChildRun b(FtrunBinary(), Agent("127.0.0.1", ""), {{"FTRUN_RDZV_TOKEN", "from-a-file"}});
  ASSERT_TRUE(WaitFor([&] { return Count("attempt=0") == 2; }, 30s)) << a.Err() << b.Err();
  auto stub = Stub();
  v1::JobStatus status;
  EXPECT_EQ(Status(*stub, "", &status).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(Status(*stub, "from-a-file", &status).ok());
  auto cli = RunFtrun({"status", "127.0.0.1:" + port_, "--token-file", dir_ / "token"}, {}, 20s);
  EXPECT_EQ(cli.exit_code, 0) << cli.err;
  auto refused = RunFtrun({"status", "127.0.0.1:" + port_}, {}, 20s);
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_NE(refused.err.find("missing or wrong job token"), std::string::npos) << refused.err;
  std::ofstream(dir_ / "done") << "";
  EXPECT_EQ(a.Wait(30s).exit_code, 0);
  EXPECT_EQ(b.Wait(30s).exit_code, 0);
}

// Whether a TCP connection to host:port is accepted.
bool Connects(const std::string& host, const std::string& port) {
  boost::asio::io_context io;
  boost::asio::ip::tcp::socket s(io);
  boost::system::error_code ec;
  s.connect({boost::asio::ip::make_address(host), static_cast<uint16_t>(std::stoi(port))}, ec);
  return !ec;
}

TEST_F(RendezvousTrust, ServerListensOnTheEndpointAddressOnly) {
  for (const std::string endpoint : {"127.0.0.1", "localhost"}) {
    SetUp();
    ChildRun a(FtrunBinary(), Agent(endpoint, ""));
    ASSERT_TRUE(WaitFor([&] { return a.Err().find("joined the job") != std::string::npos; }, 20s))
        << a.Err();
    EXPECT_TRUE(Connects("127.0.0.1", port_));
    // 127.0.0.2 is another address of this host (the loopback interface holds 127/8): a
    // server listening on every address would accept there.
    EXPECT_FALSE(Connects("127.0.0.2", port_)) << endpoint;
    EXPECT_NE(a.Err().find("listening addr=127.0.0.1:" + port_), std::string::npos) << a.Err();
    a.Signal(SIGTERM);
    a.Wait(30s);
  }
}

}  // namespace
}  // namespace ftrun::testing
