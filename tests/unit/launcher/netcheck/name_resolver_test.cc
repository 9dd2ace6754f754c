// NameResolver: lookups off the loop's io_context, answered on the loop, once.
#include "launcher/netcheck/name_resolver.h"

#include <gtest/gtest.h>

#include <chrono>

namespace ftrun::launcher {
namespace {

using namespace std::chrono_literals;

class NameResolverTest : public ::testing::Test {
 protected:
  // Runs the loop until `n` handlers have run (deadline 10 s).
  void RunUntil(int n) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (calls < n && std::chrono::steady_clock::now() < deadline) {
      io.restart();
      io.run_for(20ms);
    }
    ASSERT_EQ(calls, n) << "the lookup never answered";
  }
  NameResolver::Handler Record() {
    return [this](const boost::system::error_code& ec, NameResolver::Endpoints eps) {
      ++calls;
      error = ec;
      endpoints = std::move(eps);
    };
  }

  boost::asio::io_context io;
  int calls = 0;
  boost::system::error_code error;
  NameResolver::Endpoints endpoints;
};

TEST_F(NameResolverTest, AnIpLiteralIsAnsweredOnTheLoopNotInsideResolve) {
  NameResolver r(io);
  r.Resolve("127.0.0.1", 4242, Record());
  EXPECT_EQ(calls, 0);
  RunUntil(1);
  EXPECT_FALSE(error) << error.message();
  ASSERT_EQ(endpoints.size(), 1u);
  EXPECT_EQ(endpoints[0].address().to_string(), "127.0.0.1");
  EXPECT_EQ(endpoints[0].port(), 4242);
}

TEST_F(NameResolverTest, ANameIsLookedUpOnItsOwnThread) {
  NameResolver r(io);
  r.Resolve("localhost", 80, Record());
  RunUntil(1);
  EXPECT_FALSE(error) << error.message();
  ASSERT_FALSE(endpoints.empty());
  for (const auto& e : endpoints) EXPECT_TRUE(e.address().is_loopback()) << e.address();
}

TEST_F(NameResolverTest, ANewLookupCancelsThePendingOne) {
  NameResolver r(io);
  int first = 0;
  // An IP literal's answer is posted at once: by the time the second answer has run, the
  // first one has been delivered too, and must have been dropped.
  r.Resolve("127.0.0.2", 1,
            [&](const boost::system::error_code&, NameResolver::Endpoints) { ++first; });
  r.Resolve("127.0.0.1", 2, Record());
  RunUntil(1);
  EXPECT_EQ(endpoints.at(0).port(), 2);
  EXPECT_EQ(first, 0) << "a replaced lookup must not answer";
}

}  // namespace
}  // namespace ftrun::launcher
