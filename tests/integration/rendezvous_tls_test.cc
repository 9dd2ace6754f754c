// The rendezvous over TLS and mutual TLS (issue 17): two real agents on loopback with
// certificates made at test time by the openssl CLI; a plain-text or certificate-less
// outsider cannot even reach the service.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cstdlib>
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

class RendezvousTls : public ::testing::Test {
 protected:
  void SetUp() override {
    port_ = std::to_string(TestPort());
    if (std::system("openssl version >/dev/null 2>&1") != 0) GTEST_SKIP() << "no openssl CLI";
    // A CA, server and client certificates for localhost/127.0.0.1, and a CA not trusted.
    ASSERT_TRUE(MakeTestCertificates(dir_.path(), /*other_ca=*/true));
    ASSERT_TRUE(FileExists(dir_ / "server.pem") && FileExists(dir_ / "client.key"));
  }
  std::string Conf(bool mutual) {
    return "last_call_timeout=0.5,keep_alive_interval=0.5,keep_alive_max_attempt=6,tls_cert=" +
           dir_ / "server.pem" + ",tls_key=" + dir_ / "server.key" + ",tls_ca=" + dir_ / "ca.pem" +
           (mutual ? ",tls_client_auth=1" : "");
  }
  std::vector<std::string> Agent(bool mutual) {
    return TwoNodeAgent(dir_, "localhost:" + port_, Conf(mutual));
  }
  int Count(const std::string& needle) { return CountRecords(dir_, needle); }
  grpc::Status StatusWith(std::shared_ptr<grpc::ChannelCredentials> creds) {
    auto stub = v1::Rendezvous::NewStub(grpc::CreateChannel("localhost:" + port_, creds));
    v1::StatusRequest r;
    r.mutable_header()->set_protocol_version(rendezvous::kProtocolVersion);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 3s);
    v1::JobStatus s;
    return stub->Status(&ctx, r, &s);
  }
  grpc::SslCredentialsOptions Ssl(const std::string& cert = "", const std::string& key = "",
                                  const std::string& ca = "ca.pem") {
    grpc::SslCredentialsOptions o;
    o.pem_root_certs = ReadFile(dir_ / ca);
    if (!cert.empty()) o.pem_cert_chain = ReadFile(dir_ / cert);
    if (!key.empty()) o.pem_private_key = ReadFile(dir_ / key);
    return o;
  }
  // Runs the job, lets `outsider` try while it runs, then lets it finish.
  void RunJob(bool mutual, const std::function<void()>& outsider) {
    ChildRun a(FtrunBinary(), Agent(mutual));
    ChildRun b(FtrunBinary(), Agent(mutual));
    ASSERT_TRUE(WaitFor([&] { return Count("attempt=0") == 2; }, 30s)) << a.Err() << b.Err();
    const std::string mode = mutual ? "tls=mutual" : "tls=on";
    EXPECT_TRUE((a.Err() + b.Err()).find(mode) != std::string::npos) << a.Err() << b.Err();
    outsider();
    std::ofstream(dir_ / "done") << "";
    auto ra = a.Wait(30s), rb = b.Wait(30s);
    EXPECT_EQ(ra.exit_code, 0) << ra.err;
    EXPECT_EQ(rb.exit_code, 0) << rb.err;
  }

  TempDir dir_;
  std::string port_;
};

TEST_F(RendezvousTls, AJobRunsOverTlsAndPlainTextIsNotServed) {
  RunJob(false, [&] {
    EXPECT_FALSE(StatusWith(grpc::InsecureChannelCredentials()).ok()) << "plain text";
    EXPECT_FALSE(StatusWith(grpc::SslCredentials(Ssl("", "", "other.pem"))).ok())
        << "a client that does not trust the job's CA";
    EXPECT_TRUE(StatusWith(grpc::SslCredentials(Ssl())).ok());
    auto cli = RunFtrun({"status", "localhost:" + port_, "--tls-ca", dir_ / "ca.pem"}, {}, 20s);
    EXPECT_EQ(cli.exit_code, 0) << cli.err;
  });
}

TEST_F(RendezvousTls, MutualTlsRefusesClientsWithoutACertificateOfTheJobsCa) {
  RunJob(true, [&] {
    EXPECT_FALSE(StatusWith(grpc::SslCredentials(Ssl())).ok()) << "no client certificate";
    EXPECT_FALSE(StatusWith(grpc::SslCredentials(Ssl("other.pem", "other.key"))).ok())
        << "a client certificate of another CA";
    EXPECT_TRUE(StatusWith(grpc::SslCredentials(Ssl("client.pem", "client.key"))).ok());
    auto cli = RunFtrun({"status", "localhost:" + port_},
                        {
                            {"FTRUN_RDZV_TLS_CA", dir_ / "ca.pem"},
                            {"FTRUN_RDZV_TLS_CERT", dir_ / "client.pem"},
                            {"FTRUN_RDZV_TLS_KEY", dir_ / "client.key"},
                        },
                        20s);
    EXPECT_EQ(cli.exit_code, 0) << cli.err;
  });
}

}  // namespace
}  // namespace ftrun::testing
