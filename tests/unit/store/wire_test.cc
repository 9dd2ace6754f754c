// torch 1.13's TCPStore wire format: requests parsed (whole, in pieces, malformed, oversized,
// from a newer torch) and answers encoded as torch's client reads them. The byte strings are
// what a real torch 1.13 client sent (captured through a proxy).
#include "store/wire.h"

#include <gtest/gtest.h>

#include "store/protocol.h"

namespace ftrun::store {
namespace {

std::string Hex(const std::string& h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16)));
  }
  return out;
}

TEST(StoreWire, ParsesTorch113Requests) {
  KvLimits l;
  // SET "/k" "v1"
  auto p = ParseRequest(Hex("0002000000000000002f6b02000000000000007631"), l);
  ASSERT_EQ(p.status, Parsed::kComplete);
  EXPECT_EQ(p.request.type, Query::kSet);
  EXPECT_EQ(p.request.keys[0], "/k");
  EXPECT_EQ(p.request.value, "v1");
  EXPECT_EQ(p.consumed, 21u);
  // ADD "init/" 1
  p = ParseRequest(Hex("030500000000000000696e69742f0100000000000000"), l);
  ASSERT_EQ(p.status, Parsed::kComplete);
  EXPECT_EQ(p.request.keys[0], "init/");
  EXPECT_EQ(p.request.delta, 1);
  // WAIT ["/k"]
  p = ParseRequest(Hex("05010000000000000002000000000000002f6b"), l);
  ASSERT_EQ(p.status, Parsed::kComplete);
  EXPECT_EQ(p.request.type, Query::kWait);
  EXPECT_EQ(p.request.keys, std::vector<std::string>{"/k"});
  // COMPARE_SET "/zz" "" "new"
  p = ParseRequest(Hex("0103000000000000002f7a7a000000000000000003000000000000006e6577"), l);
  ASSERT_EQ(p.status, Parsed::kComplete);
  EXPECT_EQ(p.request.value, "");
  EXPECT_EQ(p.request.desired, "new");
  // GETNUMKEYS
  p = ParseRequest(Hex("06"), l);
  ASSERT_EQ(p.status, Parsed::kComplete);
  EXPECT_EQ(p.consumed, 1u);
}

TEST(StoreWire, EveryPrefixNeedsMore) {
  const std::string req = Hex("0103000000000000002f7a7a000000000000000003000000000000006e6577");
  for (size_t n = 0; n < req.size(); ++n) {
    EXPECT_EQ(ParseRequest(req.substr(0, n), {}).status, Parsed::kNeedMore) << n;
  }
}

TEST(StoreWire, OversizedUnknownAndNewerTorchAreRefusedAtOnce) {
  KvLimits l;
  l.max_key_bytes = 16;
  l.max_value_bytes = 32;
  l.max_keys_per_request = 2;
  // A key length of 2^40 is refused from its 9 bytes alone.
  auto p = ParseRequest(Hex("020000000000010000"), l);
  ASSERT_EQ(p.status, Parsed::kBad);
  EXPECT_NE(p.error.find("GET with a key of 1099511627776 bytes (at most 16)"), std::string::npos);
  p = ParseRequest(Hex("0002000000000000002f6bff00000000000000"), l);
  ASSERT_EQ(p.status, Parsed::kBad);
  EXPECT_NE(p.error.find("value of 255 bytes"), std::string::npos);
  p = ParseRequest(Hex("050300000000000000"), l);
  ASSERT_EQ(p.status, Parsed::kBad);
  EXPECT_NE(p.error.find("WAIT of 3 keys"), std::string::npos);
  p = ParseRequest(Hex("0d"), l);
  ASSERT_EQ(p.status, Parsed::kBad);
  EXPECT_NE(p.error.find("unknown query type 13"), std::string::npos);
  // torch >= 2.x: VALIDATE (0) and the magic 0x3C85F7CE, little-endian.
  p = ParseRequest(Hex("00cef7853c"), l);
  ASSERT_EQ(p.status, Parsed::kBad);
  EXPECT_NE(p.error.find("torch >= 2.x"), std::string::npos);
  EXPECT_NE(p.error.find("FTRUN_AGENT_STORE=0"), std::string::npos);
}

TEST(StoreProtocol, AnswersAsTorch113sServer) {
  KvStore kv;
  std::vector<Outgoing> out;
  auto apply = [&](ConnId c, const std::string& hex) {
    auto p = ParseRequest(Hex(hex), kv.limits());
    EXPECT_EQ(p.status, Parsed::kComplete) << hex;
    return Apply(kv, c, p.request, out);
  };
  ASSERT_TRUE(apply(1, "030500000000000000696e69742f0100000000000000"));  // ADD init/ 1
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].bytes, Hex("0100000000000000"));
  out.clear();
  ASSERT_TRUE(apply(2, "05010000000000000002000000000000002f6b"));  // WAIT /k: pending
  EXPECT_TRUE(out.empty());
  ASSERT_TRUE(apply(1, "0002000000000000002f6b02000000000000007631"));  // SET /k v1
  ASSERT_EQ(out.size(), 1u);  // SET answers nothing; conn 2's WAIT is released
  EXPECT_EQ(out[0].conn, 2u);
  EXPECT_EQ(out[0].bytes, Hex("00"));
  out.clear();
  ASSERT_TRUE(apply(2, "0202000000000000002f6b"));  // GET /k
  EXPECT_EQ(out[0].bytes, Hex("02000000000000007631"));
  out.clear();
  ASSERT_TRUE(apply(1, "06"));  // GETNUMKEYS
  EXPECT_EQ(out[0].bytes, Hex("0200000000000000"));
  out.clear();
  ASSERT_TRUE(apply(3, "0702000000000000002f6b"));  // WATCH_KEY /k
  EXPECT_EQ(out[0].bytes, Hex("03"));
  out.clear();
  ASSERT_TRUE(apply(1, "0802000000000000002f6b"));  // DELETE_KEY /k
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].bytes, Hex("0100000000000000"));
  EXPECT_EQ(out[1].conn, 3u);  // KEY_DELETED, "/k", old "v1", new ""
  EXPECT_EQ(out[1].bytes, Hex("0202000000000000002f6b020000000000000076310000000000000000"));
  out.clear();
  ASSERT_TRUE(apply(1, "04020000000000000002000000000000002f6b0500000000000000696e69742f"));
  // CHECK ["/k", "init/"]: /k is gone -> NOT_READY
  EXPECT_EQ(out[0].bytes, Hex("01"));
  out.clear();
  auto get_missing = apply(1, "0202000000000000002f6b");
  EXPECT_FALSE(get_missing.has_value());  // torch closes the connection
}

}  // namespace
}  // namespace ftrun::store
