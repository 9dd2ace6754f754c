// The etcd backend's settings as torch's two etcd backends spell them (etcd: cacert, cert, key,
// timeout; etcd-v2: ca_cert, ssl_cert, ssl_cert_key, join_timeout), the member list, and the
// errors for what cannot work.
#include "rendezvous/etcd/etcd_conf.h"

#include <gtest/gtest.h>

#include <fstream>

#include "launcher/cli/torchrun_args.h"
#include "launcher/config/launch_config.h"
#include "tests/support/test_support.h"

namespace ftrun::rendezvous::etcd {
namespace {

Result<EtcdConf> Resolve(const std::string& text, const EnvMap& env = {}) {
  auto conf = ParseRendezvousConf(text);
  if (!conf) return conf.error();
  return ResolveEtcdConf(*conf, {"127.0.0.1:2379"}, env);
}

std::string ErrorOf(const std::string& text) {
  auto c = Resolve(text);
  return c ? "(no error)" : c.error().message;
}

class EtcdConfFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ofstream(dir_ / "ca.pem")
        << "-----BEGIN CERTIFICATE-----\nca\n-----END CERTIFICATE-----\n";
    std::ofstream(dir_ / "cert.pem") << kCert;
    std::ofstream(dir_ / "key.pem") << kKey;
    std::ofstream(dir_ / "both.pem") << kCert << kKey;
  }
  static constexpr const char* kCert =
      "-----BEGIN CERTIFICATE-----\nclient\n-----END CERTIFICATE-----\n";
  static constexpr const char* kKey =
      "-----BEGIN PRIVATE KEY-----\nkey\n-----END PRIVATE KEY-----\n";
  ftrun::testing::TempDir dir_;
};

TEST(EtcdEndpoints, MembersWithTheDefaultPort) {
  auto m = ParseEtcdEndpoints("e0:2379,e1,[::1]:2381,10.0.0.1");
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(*m, (std::vector<std::string>{"e0:2379", "e1:2379", "[::1]:2381", "10.0.0.1:2379"}));
}

TEST(EtcdEndpoints, AnEmptyMemberIsNamed) {
  for (const char* text : {"a:1,,b:2", "a:1,", ",a:1", ""}) {
    auto m = ParseEtcdEndpoints(text);
    ASSERT_FALSE(m) << text;
    EXPECT_NE(m.error().message.find("empty etcd member"), std::string::npos) << m.error().message;
  }
  auto m = ParseEtcdEndpoints("a:1,b:x");
  ASSERT_FALSE(m);
  EXPECT_NE(m.error().message.find("'x' is not a port number"), std::string::npos);
}

TEST(EtcdConf, DefaultsArePlainTextWithAFiveSecondLease) {
  auto c = Resolve("");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_FALSE(c->client.https);
  EXPECT_EQ(c->lease_ttl, 5);
  EXPECT_EQ(c->prefix, "/ftrun/rdzv");
  EXPECT_TRUE(c->client.user.empty());
}

// torch's etcd (etcd_rendezvous.py) reads cacert, cert, key; its etcd-v2
// (etcd_rendezvous_backend.py) ca_cert, ssl_cert, ssl_cert_key, and the protocol in any case.
TEST_F(EtcdConfFiles, TorchEtcdAndEtcdV2Spellings) {
  for (const std::string& conf : {"protocol=https,cacert=" + dir_ / "ca.pem" +
                                      ",cert=" + dir_ / "cert.pem" + ",key=" + dir_ / "key.pem",
                                  "protocol=HTTPS,ca_cert=" + dir_ / "ca.pem" + ",ssl_cert=" +
                                      dir_ / "cert.pem" + ",ssl_cert_key=" + dir_ / "key.pem"}) {
    auto c = Resolve(conf);
    ASSERT_TRUE(c) << conf << ": " << c.error().message;
    EXPECT_TRUE(c->client.https);
    EXPECT_NE(c->client.tls.ca.find("ca"), std::string::npos);
    EXPECT_EQ(c->client.tls.cert, kCert);
    EXPECT_EQ(c->client.tls.key, kKey);
  }
}

// torch's etcd passes a cert without a key on to its client: one file with both.
TEST_F(EtcdConfFiles, ACertWithItsKeyInside) {
  auto c = Resolve("protocol=https,cert=" + dir_ / "both.pem");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->client.tls.cert, std::string(kCert) + kKey);
  EXPECT_EQ(c->client.tls.key, std::string(kCert) + kKey);
  EXPECT_NE(ErrorOf("protocol=https,cert=" + dir_ / "cert.pem")
                .find("cert '" + dir_ / "cert.pem" + "' holds no private key"),
            std::string::npos);
}

TEST_F(EtcdConfFiles, MistakesAreNamed) {
  EXPECT_NE(ErrorOf("protocol=ftp").find("protocol must be http or https, got 'ftp'"),
            std::string::npos);
  EXPECT_NE(ErrorOf("cacert=" + dir_ / "ca.pem").find("need protocol=https"), std::string::npos);
  EXPECT_NE(ErrorOf("protocol=https,key=" + dir_ / "key.pem").find("without cert"),
            std::string::npos);
  EXPECT_NE(ErrorOf("protocol=https,cert=" + dir_ / "cert.pem" + ",ssl_cert=" + dir_ / "both.pem")
                .find("are one setting"),
            std::string::npos);
  EXPECT_NE(ErrorOf("protocol=https,ca_cert=/nonexistent/ca.pem").find("cannot read"),
            std::string::npos);
  EXPECT_NE(ErrorOf("lease_ttl=1").find("lease_ttl needs whole seconds from 2 to 3600, got '1'"),
            std::string::npos);
  EXPECT_NE(ErrorOf("etcd_prefix=x").find("etcd_prefix must start with '/'"), std::string::npos);
  EXPECT_NE(ErrorOf("user=").find("empty value"), std::string::npos);
  auto c = Resolve("", {{"FTRUN_ETCD_PASSWORD", "pw"}});
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("password was given without a user"), std::string::npos);
}

TEST_F(EtcdConfFiles, UserAndPasswordFromTheEnvironmentOrAFile) {
  std::ofstream(dir_ / "pw") << "s3cret\n";
  auto c = Resolve("", {{"FTRUN_ETCD_USER", "u"}, {"FTRUN_ETCD_PASSWORD_FILE", dir_ / "pw"}});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->client.user, "u");
  EXPECT_EQ(c->client.password, "s3cret");
  c = Resolve("user=v,password_file=" + dir_ / "pw", {{"FTRUN_ETCD_PASSWORD", "other"}});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->client.user, "v");
  EXPECT_EQ(c->client.password, "s3cret");
  c = Resolve("user=v", {{"FTRUN_ETCD_PASSWORD", "p"}});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->client.password, "p");
}

// The round's deadline as torch has it: its etcd backend's `timeout` (torchrun passes 900 s),
// its etcd-v2's join_timeout (600 s); ftrun's etcd-v3 as etcd-v2.
TEST(EtcdTimeouts, EachBackendNameKeepsTorchsKey) {
  auto build = [](const std::string& backend, const std::string& conf) {
    std::vector<std::string> argv = {"--nnodes",        "2",       "--rdzv-backend", backend,
                                     "--rdzv-endpoint", "e0:2379", "--rdzv-conf",    conf,
                                     "train.py"};
    auto parsed = launcher::ParseTorchrunArgs(argv);
    EXPECT_EQ(parsed.action, launcher::ParsedCommandLine::Action::kRun) << parsed.error;
    auto c = launcher::BuildLaunchConfig(parsed.args, {});
    EXPECT_TRUE(c) << c.error().message;
    return c ? c->rdzv.join_timeout.count() : -1.0;
  };
  EXPECT_EQ(build("etcd", "last_call_timeout=1"), 900);
  EXPECT_EQ(build("etcd", "timeout=120"), 120);
  EXPECT_EQ(build("etcd", "join_timeout=5"), 900) << "torch's etcd has no join_timeout";
  for (const char* name : {"etcd-v2", "etcd-v3"}) {
    EXPECT_EQ(build(name, "last_call_timeout=1"), 600) << name;
    EXPECT_EQ(build(name, "join_timeout=100"), 100) << name;
    EXPECT_EQ(build(name, "timeout=120"), 600) << name << ": timeout waits for etcd only";
  }
}

}  // namespace
}  // namespace ftrun::rendezvous::etcd
