// StoreProbe against real sockets on 127.0.0.1: a listening store is never reported, a port
// nobody listens on is reported once after the failures in a row, naming it.
#include "launcher/coordinator/store_probe.h"

#include <gtest/gtest.h>

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
  StoreProbe probe(io, Fast(), [&](uint64_t, const std::string&) { ++reports; });
  probe.Watch(3, "127.0.0.1", store.local_endpoint().port());
  ASSERT_TRUE(RunUntil(
      io, [&] { return probe.checks() >= 6; }, 10s));
  EXPECT_EQ(reports, 0);
}

TEST(StoreProbeTest, AStoreNobodyListensOnIsReportedOnceNamingIt) {
  boost::asio::io_context io;
  const int port = PickFreePort().value();  // nobody listens there
  std::vector<std::pair<uint64_t, std::string>> reports;
  StoreProbe probe(io, Fast(), [&](uint64_t round, const std::string& error) {
    reports.emplace_back(round, error);
  });
  probe.Watch(7, "localhost", port);
  ASSERT_TRUE(RunUntil(
      io, [&] { return !reports.empty(); }, 10s));
  EXPECT_GE(probe.checks(), 3) << "only after the failures in a row";
  EXPECT_EQ(reports[0].first, 7u);
  EXPECT_NE(reports[0].second.find("localhost:" + std::to_string(port) + ": "), std::string::npos)
      << reports[0].second;
  // Once per round, however long it lasts; a new round may be reported again.
  const int seen = probe.checks();
  ASSERT_TRUE(RunUntil(
      io, [&] { return probe.checks() >= seen + 5; }, 10s));
  EXPECT_EQ(reports.size(), 1u);
  probe.Watch(8, "localhost", port);
  ASSERT_TRUE(RunUntil(
      io, [&] { return reports.size() == 2; }, 10s));
  EXPECT_EQ(reports[1].first, 8u);
  // Stopped: nothing more.
  probe.Stop();
  const int stopped_at = probe.checks();
  io.run_for(200ms);
  EXPECT_EQ(probe.checks(), stopped_at);
}

}  // namespace
}  // namespace ftrun::launcher
