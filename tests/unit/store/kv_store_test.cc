// The store's key/value core: torch 1.13's TCPStore semantics, waiters, watches and bounds.
#include "store/kv_store.h"

#include <gtest/gtest.h>

namespace ftrun::store {
namespace {

std::vector<ConnId> Released(KvStore& kv) {
  std::vector<ConnId> out;
  for (auto& e : kv.TakeEvents()) {
    if (auto* w = std::get_if<WaitReleased>(&e)) out.push_back(w->conn);
  }
  return out;
}

TEST(KvStore, SetGetDeleteAndCount) {
  KvStore kv;
  ASSERT_TRUE(kv.Set("/a", "1"));
  ASSERT_TRUE(kv.Set("/b", std::string("\0\xff", 2)));
  EXPECT_EQ(*kv.Get("/a"), "1");
  EXPECT_EQ(*kv.Get("/b"), std::string("\0\xff", 2));
  EXPECT_EQ(kv.Get("/c"), nullptr);
  EXPECT_EQ(kv.size(), 2u);
  EXPECT_EQ(kv.bytes(), 2u + 1 + 2 + 2);
  EXPECT_TRUE(kv.Delete("/a"));
  EXPECT_FALSE(kv.Delete("/a"));
  EXPECT_EQ(kv.size(), 1u);
  EXPECT_EQ(kv.bytes(), 4u);
}

TEST(KvStore, AddKeepsDecimalTextAndRefusesNonIntegers) {
  KvStore kv;
  EXPECT_EQ(kv.Add("/n", 5).value(), 5);
  EXPECT_EQ(kv.Add("/n", -7).value(), -2);
  EXPECT_EQ(*kv.Get("/n"), "-2");
  ASSERT_TRUE(kv.Set("/s", "abc"));
  EXPECT_FALSE(kv.Add("/s", 1).has_value());
  EXPECT_EQ(*kv.Get("/s"), "abc");
  ASSERT_TRUE(kv.Set("/big", std::to_string(INT64_MAX)));
  EXPECT_FALSE(kv.Add("/big", 1).has_value());
}

TEST(KvStore, CompareSetFollowsTorch113) {
  KvStore kv;
  // Unset key, non-empty expected: unchanged, answers `expected`.
  EXPECT_EQ(kv.CompareSet("/k", "x", "y").value(), "x");
  EXPECT_EQ(kv.Get("/k"), nullptr);
  // Unset key, empty expected: set.
  EXPECT_EQ(kv.CompareSet("/k", "", "v1").value(), "v1");
  EXPECT_EQ(kv.CompareSet("/k", "nope", "v2").value(), "v1");
  EXPECT_EQ(kv.CompareSet("/k", "v1", "v2").value(), "v2");
  EXPECT_EQ(*kv.Get("/k"), "v2");
}

TEST(KvStore, WaitIsReleasedWhenEveryKeyIsSet) {
  KvStore kv;
  ASSERT_TRUE(kv.Set("/a", "1"));
  EXPECT_TRUE(kv.Wait(7, {"/a"}));
  EXPECT_FALSE(kv.Wait(7, {"/a", "/b", "/c", "/b"}));
  EXPECT_EQ(kv.waiting(), 1u);
  ASSERT_TRUE(kv.Set("/b", "x"));
  EXPECT_TRUE(Released(kv).empty());
  EXPECT_EQ(kv.Add("/c", 1).value(), 1);
  EXPECT_EQ(Released(kv), std::vector<ConnId>{7});
  EXPECT_EQ(kv.waiting(), 0u);
  // A CAS that creates the key releases too.
  EXPECT_FALSE(kv.Wait(8, {"/d"}));
  ASSERT_TRUE(kv.CompareSet("/d", "", "v"));
  EXPECT_EQ(Released(kv), std::vector<ConnId>{8});
}

TEST(KvStore, ANewWaitReplacesThePendingOneAndDisconnectForgetsIt) {
  KvStore kv;
  EXPECT_FALSE(kv.Wait(1, {"/never"}));
  EXPECT_FALSE(kv.Wait(1, {"/x"}));  // the client gave up on /never
  ASSERT_TRUE(kv.Set("/never", "1"));
  EXPECT_TRUE(Released(kv).empty());
  ASSERT_TRUE(kv.Set("/x", "1"));
  EXPECT_EQ(Released(kv), std::vector<ConnId>{1});
  EXPECT_FALSE(kv.Wait(2, {"/y"}));
  kv.Disconnect(2);
  EXPECT_EQ(kv.waiting(), 0u);
  ASSERT_TRUE(kv.Set("/y", "1"));
  EXPECT_TRUE(Released(kv).empty());
}

TEST(KvStore, WatchReportsCreatedUpdatedDeleted) {
  KvStore kv;
  ASSERT_TRUE(kv.Watch(3, "/w"));
  ASSERT_TRUE(kv.Set("/w", "a"));
  ASSERT_TRUE(kv.Set("/w", "b"));
  ASSERT_TRUE(kv.Delete("/w"));
  auto events = kv.TakeEvents();
  ASSERT_EQ(events.size(), 3u);
  auto f = [&](size_t i) { return std::get<WatchFired>(events[i]); };
  EXPECT_EQ(f(0).event, WatchEvent::kCreated);
  EXPECT_EQ(f(0).new_value, "a");
  EXPECT_EQ(f(1).event, WatchEvent::kUpdated);
  EXPECT_EQ(f(1).old_value, "a");
  EXPECT_EQ(f(1).new_value, "b");
  EXPECT_EQ(f(2).event, WatchEvent::kDeleted);
  EXPECT_EQ(f(2).old_value, "b");
  kv.Disconnect(3);
  ASSERT_TRUE(kv.Set("/w", "c"));
  EXPECT_TRUE(kv.TakeEvents().empty());
}

TEST(KvStore, BoundsRefuseAndChangeNothing) {
  KvLimits l;
  l.max_key_bytes = 4;
  l.max_value_bytes = 8;
  l.max_total_bytes = 20;
  l.max_watches_per_conn = 2;
  KvStore kv(l);
  EXPECT_FALSE(kv.Set("/long", "v").has_value());
  EXPECT_FALSE(kv.Set("/k", "123456789").has_value());
  ASSERT_TRUE(kv.Set("/k1", "12345678"));  // 11 bytes
  auto full = kv.Set("/k2", "12345678");   // 22 > 20
  ASSERT_FALSE(full.has_value());
  EXPECT_NE(full.error().message.find("full"), std::string::npos);
  EXPECT_EQ(kv.size(), 1u);
  ASSERT_TRUE(kv.Set("/k1", "1"));  // replacing frees room
  ASSERT_TRUE(kv.Set("/k2", "12345678"));
  EXPECT_TRUE(kv.Watch(1, "/a"));
  EXPECT_TRUE(kv.Watch(1, "/b"));
  EXPECT_FALSE(kv.Watch(1, "/c").has_value());
}

// What an outsider on the store's port could pile up: keys (each costs more than its bytes)
// and keys named by pending WAITs and WATCH_KEYs of many connections.
TEST(KvStore, KeysAndAwaitedKeysAreBoundedInAll) {
  KvLimits l;
  l.max_keys = 2;
  l.max_registered_bytes = 10;
  KvStore kv(l);
  ASSERT_TRUE(kv.Set("/a", ""));
  ASSERT_TRUE(kv.Set("/b", ""));
  auto full = kv.Set("/c", "");
  ASSERT_FALSE(full.has_value());
  EXPECT_EQ(full.error().message, "the store holds 2 keys (at most 2)");
  ASSERT_TRUE(kv.Set("/a", "replaced")) << "replacing adds no key";
  ASSERT_TRUE(kv.Delete("/b"));
  ASSERT_TRUE(kv.Set("/c", ""));
  // 3 + 3 bytes awaited by two connections; a third wait of 7 more is refused.
  ASSERT_TRUE(kv.AdmitWait(1, {"/x1", "/a"}));  // "/a" is set: not awaited
  EXPECT_FALSE(kv.Wait(1, {"/x1", "/a"}));
  ASSERT_TRUE(kv.Watch(2, "/y1"));
  EXPECT_EQ(kv.registered_bytes(), 6u);
  auto over = kv.AdmitWait(3, {"/z12", "/z2"});
  ASSERT_FALSE(over.has_value());
  EXPECT_NE(over.error().message.find("at most 10"), std::string::npos) << over.error().message;
  EXPECT_FALSE(kv.Watch(3, "/z1234").has_value());
  // A connection's new wait replaces its own; a gone connection gives its bytes back.
  EXPECT_TRUE(kv.AdmitWait(1, {"/x1234"}));
  kv.Disconnect(1);
  kv.Disconnect(2);
  EXPECT_EQ(kv.registered_bytes(), 0u);
  EXPECT_TRUE(kv.AdmitWait(3, {"/z12", "/z2"}));
}

TEST(KvStore, DropPrefixRemovesOnlyThoseKeys) {
  KvStore kv;
  ASSERT_TRUE(kv.Set("//worker/attempt_0/a", "1"));
  ASSERT_TRUE(kv.Set("//worker/attempt_1/b", "2"));
  ASSERT_TRUE(kv.Set("init/", "4"));
  ASSERT_TRUE(kv.Set("/mine", "5"));
  EXPECT_EQ(kv.DropPrefix("//worker/"), 2u);
  EXPECT_EQ(kv.size(), 2u);
  EXPECT_EQ(kv.bytes(), 5u + 1 + 5 + 1);
}

}  // namespace
}  // namespace ftrun::store
