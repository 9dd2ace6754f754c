// StoreProbe against real sockets on 127.0.0.1: a listening store is never reported, a port
// nobody listens on is reported once after the failures in a row, naming it; in a larger
// round every member is checked (ring neighbours, the rotation) and only the one that does
// not answer is reported.
#include "launcher/coordinator/store_probe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <boost/asio/ip/tcp.hpp>

#include "launcher/config/host.h"

namespace ftrun::launcher {
namespace {

using namespace std::chrono_literals;

StoreProbeOptions Fast() {
  StoreProbeOptions o;
  o.interval = 20ms;
  o.timeout = 500ms;
  o.failures = 3;
  return o;
}

// Runs the loop until `cond` holds or `timeout` passes.
bool RunUntil(boost::asio::io_context& io, const std::function<bool()>& cond,
              std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!cond() && std::chrono::steady_clock::now() < deadline) io.run_for(10ms);
  return cond();
}

TEST(StoreProbeTest, AListeningStoreIsNeverReported) {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor store(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
  store.listen();
  int reports = 0;
  StoreProbe probe(io, Fast(),
                   [&](uint64_t, const StoreTarget&, const std::string&) { ++reports; });
  probe.Watch(3, 1, 2, {{0, "127.0.0.1", store.local_endpoint().port()}});
  ASSERT_TRUE(RunUntil(
      io, [&] { return probe.checks() >= 6; }, 10s));
  EXPECT_EQ(reports, 0);
}

TEST(StoreProbeTest, AStoreNobodyListensOnIsReportedOnceNamingIt) {
  boost::asio::io_context io;
  const int port = PickFreePort().value();  // nobody listens there
  boost::asio::ip::tcp::acceptor other(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
  other.listen();
  const int other_port = other.local_endpoint().port();
  std::vector<std::pair<uint64_t, std::string>> reports;
  StoreProbe probe(io, Fast(), [&](uint64_t round, const StoreTarget&, const std::string& error) {
    reports.emplace_back(round, error);
  });
  // Its own store (1) is skipped; 2 listens.
  probe.Watch(7, 1, 3, {{0, "localhost", port}, {1, "localhost", 1}, {2, "127.0.0.1", other_port}});
  ASSERT_TRUE(RunUntil(
      io, [&] { return !reports.empty(); }, 10s));
  EXPECT_GE(probe.checks(), 3) << "only after the failures in a row";
  EXPECT_EQ(reports[0].first, 7u);
  EXPECT_NE(reports[0].second.find("localhost:" + std::to_string(port) + ": "), std::string::npos)
      << reports[0].second;
  // Once per round, however long it lasts (the others are still checked); a new round may be
  // reported again.
  const int seen = probe.checks_of(2);
  ASSERT_TRUE(RunUntil(
      io, [&] { return probe.checks_of(2) >= seen + 5; }, 10s));
  EXPECT_EQ(reports.size(), 1u);
  // A round first seen without stores (while a restarted master rebuilds it), then with them.
  probe.Watch(8, 1, 2, {});
  probe.Watch(8, 1, 2, {{0, "localhost", port}});
  ASSERT_TRUE(RunUntil(
      io, [&] { return reports.size() == 2; }, 10s));
  EXPECT_EQ(reports[1].first, 8u);
  // Stopped: nothing more.
  probe.Stop();
  const int stopped_at = probe.checks();
  io.run_for(200ms);
  EXPECT_EQ(probe.checks(), stopped_at);
}

TEST(StoreProbeTest, EveryMemberIsCheckedAndOnlyTheSilentOneReported) {
  boost::asio::io_context io;
  // Eight members; this node is group rank 3; rank 6 listens nowhere.
  std::vector<std::unique_ptr<boost::asio::ip::tcp::acceptor>> stores;
  std::vector<StoreTarget> targets;
  for (int rank = 0; rank < 8; ++rank) {
    if (rank == 6) {
      targets.push_back({rank, "127.0.0.1", PickFreePort().value()});
      continue;
    }
    stores.push_back(std::make_unique<boost::asio::ip::tcp::acceptor>(
        io, boost::asio::ip::tcp::endpoint{boost::asio::ip::make_address("127.0.0.1"), 0}));
    stores.back()->listen();
    targets.push_back({rank, "127.0.0.1", stores.back()->local_endpoint().port()});
  }
  std::vector<int> reported;
  StoreProbe probe(io, Fast(), [&](uint64_t, const StoreTarget& t, const std::string&) {
    reported.push_back(t.group_rank);
  });
  probe.Watch(1, 3, 8, targets);
  ASSERT_TRUE(RunUntil(
      io,
      [&] {
        for (int rank : {0, 1, 2, 4, 5, 6, 7}) {
          if (probe.checks_of(rank) < 2) return false;
        }
        return !reported.empty();
      },
      20s));
  EXPECT_EQ(probe.checks_of(3), 0) << "not its own store";
  // Bounded: each interval at most the two neighbours, group rank 0, one in rotation and the
  // suspects (here the one silent member); plus one sweep of the 7 others at the first failure.
  const int intervals = probe.checks_of(2);  // a neighbour: checked every interval
  EXPECT_LE(probe.checks(), intervals * 5 + 5 + 7);
  EXPECT_GE(probe.checks_of(1), 2) << "the rotation reaches the others too";
  ASSERT_EQ(reported, std::vector<int>{6});
}

// In a round of 300 nodes group rank 0 is checked every third interval (ceil(300/128)), so
// that it receives at most about 128 checks an interval; the neighbours every interval.
TEST(StoreProbeTest, GroupRankZeroOfALargeRoundIsCheckedLessOften) {
  boost::asio::io_context io;
  std::vector<std::unique_ptr<boost::asio::ip::tcp::acceptor>> stores;
  std::vector<StoreTarget> targets;
  for (int rank : {0, 4, 6, 7}) {
    stores.push_back(std::make_unique<boost::asio::ip::tcp::acceptor>(
        io, boost::asio::ip::tcp::endpoint{boost::asio::ip::make_address("127.0.0.1"), 0}));
    stores.back()->listen();
    targets.push_back({rank, "127.0.0.1", stores.back()->local_endpoint().port()});
  }
  StoreProbeOptions o = Fast();
  o.interval = 50ms;
  StoreProbe probe(io, o, [](uint64_t, const StoreTarget&, const std::string&) {});
  probe.Watch(1, 5, 300, targets);
  ASSERT_TRUE(RunUntil(
      io, [&] { return probe.checks_of(4) >= 12; }, 20s));
  EXPECT_GE(probe.checks_of(0), 3);
  EXPECT_LE(probe.checks_of(0), probe.checks_of(4) / 2) << "about a third as often";
  EXPECT_GE(probe.checks_of(6), probe.checks_of(4) - 1) << "both neighbours every interval";
}

// A round of 100 members seen from group rank 50, every store listening but those of
// `silent`: a shared listening acceptor stands for the others.
struct LargeRound {
  explicit LargeRound(boost::asio::io_context& io, const std::vector<int>& silent)
      : store(io, {boost::asio::ip::make_address("127.0.0.1"), 0}) {
    store.listen(4096);
    const int dead = PickFreePort().value();  // nobody listens there
    for (int rank = 0; rank < 100; ++rank) {
      const bool quiet = std::find(silent.begin(), silent.end(), rank) != silent.end();
      targets.push_back({rank, "127.0.0.1", quiet ? dead : store.local_endpoint().port()});
    }
  }
  boost::asio::ip::tcp::acceptor store;
  std::vector<StoreTarget> targets;
};

// Rank 10 is far from rank 50 on the ring: the rotation would reach it after 56 intervals
// (11 s here). A sweep (a suspected hang) checks every member at once, at most
// sweep_concurrency at a time, and names it after `failures` checks; the same cause again
// does not sweep again.
TEST(StoreProbeTest, ASweepFindsAFarSilentMemberAtOnce) {
  boost::asio::io_context io;
  LargeRound round(io, {10});
  StoreProbeOptions o = Fast();
  o.interval = 200ms;
  o.sweep_concurrency = 8;
  std::vector<int> reported;
  StoreProbe probe(io, o, [&](uint64_t, const StoreTarget& t, const std::string&) {
    reported.push_back(t.group_rank);
  });
  probe.Watch(1, 50, 100, round.targets);
  probe.Sweep(7);
  ASSERT_TRUE(RunUntil(
      io, [&] { return !reported.empty(); }, 5s))
      << "checks of rank 10: " << probe.checks_of(10);
  EXPECT_EQ(reported, std::vector<int>{10});
  EXPECT_LE(probe.max_in_flight(), 8u);
  for (int rank : {1, 30, 70, 99}) EXPECT_GE(probe.checks_of(rank), 1) << rank;
  // Bounded: one sweep (99) plus a few intervals of the usual checks.
  const int checks = probe.checks();
  EXPECT_LE(checks, 99 + 5 * (probe.checks_of(51) + 1));
  probe.Sweep(7);  // the same cause: nothing more
  probe.Sweep(3);  // an older one: nothing either
  io.run_for(50ms);
  EXPECT_LE(probe.checks(), checks + 5);
}

// The first failed check of a round (here of a ring neighbour) sweeps the others: a second
// silent member far away on the ring is named as fast as the neighbour.
TEST(StoreProbeTest, AFailedCheckSweepsTheOthers) {
  boost::asio::io_context io;
  LargeRound round(io, {51, 10});
  StoreProbeOptions o = Fast();
  o.interval = 200ms;
  std::vector<int> reported;
  StoreProbe probe(io, o, [&](uint64_t, const StoreTarget& t, const std::string&) {
    reported.push_back(t.group_rank);
  });
  probe.Watch(1, 50, 100, round.targets);
  ASSERT_TRUE(RunUntil(
      io, [&] { return reported.size() == 2; }, 5s))
      << "checks of rank 10: " << probe.checks_of(10);
  std::sort(reported.begin(), reported.end());
  EXPECT_EQ(reported, (std::vector<int>{10, 51}));
  EXPECT_LE(probe.max_in_flight(), o.sweep_concurrency);
}

}  // namespace
}  // namespace ftrun::launcher
