// Per-node credentials, the job token, bounded logging of peer text and the joiner's claims:
// the pure helpers (the server's side: rendezvous_server_test.cc).
#include "rendezvous/credentials.h"

#include <gtest/gtest.h>

#include <fstream>

#include "rendezvous/rendezvous_state.h"
#include "rendezvous/wire.h"

namespace ftrun::rendezvous {
namespace {

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

}  // namespace
}  // namespace ftrun::rendezvous
