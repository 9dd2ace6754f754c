// The flash-checkpoint replica channel of real agents (`ftrun master` and two ftrun agents
// with fake workers on loopback): each agent listens on the address it reports, and a copy
// from anyone without the round's replica key is refused before anything is stored, with one
// bounded log line; with mutual TLS only holders of the job's certificates reach it at all.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <regex>

#include "ftrun/v1/replica.grpc.pb.h"
#include "tests/support/test_support.h"

namespace ftrun::testing {
namespace {

using namespace std::chrono_literals;

grpc::Status Push(const std::string& target, const std::string& key, bool header = true,
                  std::shared_ptr<grpc::ChannelCredentials> creds = nullptr) {
  grpc::ChannelArguments args;
  args.SetSslTargetNameOverride("localhost");  // the name the test certificates carry
  auto stub = v1::Replica::NewStub(
      grpc::CreateCustomChannel(target, creds ? creds : grpc::InsecureChannelCredentials(), args));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 10s);
  v1::ReplicaAck ack;
  auto writer = stub->Push(&ctx, &ack);
  v1::ReplicaChunk chunk;
  if (header) {
    chunk.mutable_header()->set_key(key);
    chunk.mutable_header()->set_group("rank-0");
    chunk.mutable_header()->set_step(7);
    chunk.mutable_header()->set_bytes(4);
  }
  chunk.set_data("evil");
  chunk.set_last(true);
  writer->Write(chunk);
  writer->WritesDone();
  return writer->Finish();
}

// `ftrun master` and two agents with one fake worker each, holding their round until the
// file "go" exists; `conf`: their --rdzv-conf (TLS options), `host`: the endpoint's host.
class ReplicaJob {
 public:
  ReplicaJob(const TempDir& dir, const std::string& conf, const std::string& host = "127.0.0.1")
      : dir_(dir),
        port_(std::to_string(TestPort())),
        master_(FtrunBinary(), {"master", "--port", port_, "--nnodes", "2", "--rdzv-id", "job",
                                "--rdzv-conf", conf}) {
    EXPECT_TRUE(WaitFor([&] { return master_.Err().find("listening") != std::string::npos; }, 10s))
        << master_.Err();
    for (auto* agent : {&a_, &b_}) {
      *agent = std::make_unique<ChildRun>(
          FtrunBinary(),
          FakeWorkerJob(
              {"--log-dir", dir / "logs", "--nproc-per-node", "1"},
              {"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", host + ":" + port_,
               "--rdzv-id", "job", "--rdzv-conf", conf + ",is_host=0", "--local-addr", "127.0.0.1"},
              {"wait-file", dir / "go"}));
    }
    EXPECT_TRUE(WaitFor(
        [&] {
          return a_->Err().find("round started") != std::string::npos &&
                 b_->Err().find("round started") != std::string::npos;
        },
        30s))
        << a_->Err() << b_->Err();
  }
  // Node a's replica service: its log line's address, port and TLS mode.
  std::smatch Listening() {
    err_ = a_->Err();
    std::smatch m;
    EXPECT_TRUE(std::regex_search(
        err_, m, std::regex(R"(replica service listening addr=(\S+):(\d+) tls=(\S+))")))
        << err_;
    return m;
  }
  ChildRun& a() { return *a_; }
  ChildRun& b() { return *b_; }
  // Lets the workers finish; both agents exit 0.
  void Finish() {
    std::ofstream(dir_ / "go") << "go";
    EXPECT_EQ(a_->Wait(30s).exit_code, 0) << a_->Err();
    EXPECT_EQ(b_->Wait(30s).exit_code, 0) << b_->Err();
    master_.Wait(30s);
  }

 private:
  const TempDir& dir_;
  std::string port_;
  ChildRun master_;
  std::unique_ptr<ChildRun> a_, b_;
  std::string err_;  // what Listening's match points into
};

TEST(ReplicaTrust, ACopyWithoutTheRoundsKeyIsRefusedByARealAgent) {
  TempDir dir;
  ReplicaJob job(dir, "last_call_timeout=0.5");
  // Each agent listens on the address it reports to the rendezvous, on a port of its own.
  auto m = job.Listening();
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[1].str(), "127.0.0.1");
  EXPECT_EQ(m[3].str(), "off");
  const std::string target = "127.0.0.1:" + m[2].str();
  EXPECT_NE(job.b().Err().find("replicas: round=0 copies=2 targets=[" + target + "]"),
            std::string::npos)
      << job.b().Err();

  const std::string forged = "forged-" + std::string(100, 'k');
  EXPECT_EQ(Push(target, forged).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Push(target, "").error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Push(target, std::string(10000, 'x')).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Push(target, "", false).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  ASSERT_TRUE(WaitFor(
      [&] { return job.a().Err().find("refused: wrong replica key") != std::string::npos; }, 10s));
  // One bounded line per refusal: the peer's address and why, never what it sent.
  EXPECT_EQ(job.a().Err().find(forged), std::string::npos);
  EXPECT_EQ(job.a().Err().find("xxxxxxxxxx"), std::string::npos);
  EXPECT_EQ(job.a().Err().find("evil"), std::string::npos);
  job.Finish();
}

// With mutual TLS on the rendezvous the replica service takes the same certificates: a
// plain-text copy and a TLS one without a client certificate never reach the service (no
// key check is logged); one with the job's certificate does, and its forged key is refused.
TEST(ReplicaTrust, WithMutualTlsOnlyTheJobsCertificateHoldersReachTheService) {
  if (std::system("openssl version >/dev/null 2>&1") != 0) GTEST_SKIP() << "no openssl CLI";
  TempDir dir;
  ASSERT_TRUE(MakeTestCertificates(dir.path()));
  ReplicaJob job(dir,
                 "last_call_timeout=0.5,tls_cert=" + dir / "server.pem" + ",tls_key=" +
                     dir / "server.key" + ",tls_ca=" + dir / "ca.pem" + ",tls_client_auth=1",
                 "localhost");
  auto m = job.Listening();
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[3].str(), "on");
  const std::string target = "127.0.0.1:" + m[2].str();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ReadFile(dir / "ca.pem");
  const auto anonymous = grpc::SslCredentials(ssl);
  ssl.pem_cert_chain = ReadFile(dir / "client.pem");
  ssl.pem_private_key = ReadFile(dir / "client.key");
  const auto member = grpc::SslCredentials(ssl);

  EXPECT_EQ(Push(target, "forged").error_code(), grpc::StatusCode::UNAVAILABLE) << "plain text";
  EXPECT_EQ(Push(target, "forged", true, anonymous).error_code(), grpc::StatusCode::UNAVAILABLE)
      << "no client certificate";
  EXPECT_EQ(job.a().Err().find("wrong replica key"), std::string::npos) << job.a().Err();
  EXPECT_EQ(Push(target, "forged", true, member).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(WaitFor(
      [&] { return job.a().Err().find("refused: wrong replica key") != std::string::npos; }, 10s));
  job.Finish();
}

}  // namespace
}  // namespace ftrun::testing
