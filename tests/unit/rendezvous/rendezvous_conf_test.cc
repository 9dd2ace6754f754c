#include "rendezvous/rendezvous_conf.h"

#include <gtest/gtest.h>

#include "common/endpoint.h"

namespace ftrun::rendezvous {
namespace {

TEST(RendezvousConf, DefaultsAreTorchrunDefaults) {
  auto c = ParseRendezvousConf("");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->timeout.count(), 900);
  EXPECT_EQ(c->join_timeout.count(), 600);
  EXPECT_EQ(c->last_call_timeout.count(), 30);
  EXPECT_EQ(c->close_timeout.count(), 30);
  EXPECT_EQ(c->keep_alive_interval.count(), 5);
  EXPECT_EQ(c->keep_alive_max_attempt, 3);
  EXPECT_FALSE(c->is_host);
  EXPECT_TRUE(c->token.empty());
}

TEST(RendezvousConf, ParsesKnownKeys) {
  auto c = ParseRendezvousConf(
      " join_timeout = 10 ,last_call_timeout=0.5,close_timeout=3,timeout=60,is_host=False,"
      "keep_alive_interval=1,keep_alive_max_attempt=4,heartbeat_timeout=2,read_timeout=9,"
      "rank=2,local_addr=10.0.0.5,token=s3cret,store_type=tcp");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->join_timeout.count(), 10);
  EXPECT_EQ(c->last_call_timeout.count(), 0.5);
  EXPECT_EQ(c->close_timeout.count(), 3);
  EXPECT_EQ(c->timeout.count(), 60);
  EXPECT_EQ(c->is_host, false);
  EXPECT_EQ(c->keep_alive_interval.count(), 1);
  EXPECT_EQ(c->keep_alive_max_attempt, 4);
  EXPECT_EQ(c->rank, 2);
  EXPECT_EQ(c->local_addr, "10.0.0.5");
  EXPECT_EQ(c->token, "s3cret");
  EXPECT_TRUE(c->warnings.empty());
  // DLRover's spelling (its usage text: lastcall_timeout=60).
  auto d = ParseRendezvousConf("lastcall_timeout=60");
  ASSERT_TRUE(d) << d.error().message;
  EXPECT_EQ(d->last_call_timeout.count(), 60);
  EXPECT_TRUE(d->warnings.empty());
}

TEST(RendezvousConf, UnknownKeyIsAWarning) {
  auto c = ParseRendezvousConf("foo=1");
  ASSERT_TRUE(c);
  ASSERT_EQ(c->warnings.size(), 1u);
  EXPECT_NE(c->warnings[0].find("foo"), std::string::npos);
}

TEST(RendezvousConf, ErrorsNameTheKey) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"join_timeout=", "join_timeout"},
      {"=5", "empty key"},
      {"a=1,", "empty key"},
      {"join_timeout", "key=value"},
      {"join_timeout=-1", "join_timeout"},
      {"timeout=abc", "timeout"},
      {"timeout=nan", "timeout"},
      {"is_host=maybe", "is_host"},
      {"keep_alive_max_attempt=0", "keep_alive_max_attempt"},
      {"rank=x", "rank"},
      {"store_type=file", "store_type"},
      // longer than a timer can hold (found by fuzzing)
      {"join_timeout=6e87", "join_timeout"},
      {"keep_alive_interval=1e8,keep_alive_max_attempt=11", "keep_alive_max_attempt"},
  };
  for (const auto& [text, expect] : cases) {
    auto c = ParseRendezvousConf(text);
    ASSERT_FALSE(c) << text;
    EXPECT_NE(c.error().message.find(expect), std::string::npos)
        << text << " -> " << c.error().message;
    EXPECT_EQ(c.error().message.rfind("--rdzv-conf", 0), 0u) << c.error().message;
  }
}

TEST(RendezvousConf, Bools) {
  for (const char* t : {"1", "true", "T", "yes", "Y"}) EXPECT_EQ(ParseBool(t), true) << t;
  for (const char* f : {"0", "false", "F", "no", "n"}) EXPECT_EQ(ParseBool(f), false) << f;
  EXPECT_FALSE(ParseBool("2"));
}

TEST(Endpoint, Forms) {
  auto e = ParseEndpoint("node1:29400", 1, "--x");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->host, "node1");
  EXPECT_EQ(e->port, 29400);
  EXPECT_EQ(ParseEndpoint("node1", 29400, "--x")->port, 29400);
  EXPECT_EQ(ParseEndpoint("[::1]:5", 1, "--x")->host, "::1");
  EXPECT_EQ(ParseEndpoint("[::1]", 7, "--x")->port, 7);
  EXPECT_EQ(ParseEndpoint("fe80::1", 7, "--x")->host, "fe80::1");
  EXPECT_EQ((Endpoint{"::1", 5}).ToString(), "[::1]:5");
  EXPECT_EQ((Endpoint{"h", 5}).ToString(), "h:5");
  for (const char* bad : {"h:", "h:x", "h:70000", ":5", "[::1", "[]:5", "[::1]x", ""}) {
    auto r = ParseEndpoint(bad, 1, "--rdzv-endpoint");
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().message.rfind("--rdzv-endpoint", 0), 0u) << r.error().message;
  }
  EXPECT_FALSE(ParseEndpoint("h", -1, "--x"));
}

}  // namespace
}  // namespace ftrun::rendezvous
