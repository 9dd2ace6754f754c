// StartAgentStore: where each node's store listens, which must be where the other nodes reach
// it (the partition checks connect there). Real listening sockets on loopback: the host's
// loopback interface holds all of 127/8, so 127.0.0.2 stands for a second address of this host.
#include "launcher/agent/agent_store.h"

#include <gtest/gtest.h>

#include <boost/asio/ip/tcp.hpp>

namespace ftrun::launcher {
namespace {

bool Connects(const std::string& addr, uint16_t port) {
  boost::asio::io_context io;
  boost::asio::ip::tcp::socket s(io);
  boost::system::error_code ec;
  s.connect({boost::asio::ip::make_address(addr), port}, ec);
  return !ec;
}

LaunchConfig Static(int node_rank, const std::string& master_addr, const std::string& local_addr) {
  LaunchConfig c;
  c.backend = RendezvousBackend::kStatic;
  c.node_rank = node_rank;
  c.master_addr = master_addr;
  c.local_addr = local_addr;
  return c;
}

TEST(AgentStore, NodeRankZeroOnTheMastersHostListensAtTheMasterAddress) {
  boost::asio::io_context io;
  auto server = StartAgentStore(io, Static(0, "127.0.0.2", "127.0.0.1"), "localhost", {});
  ASSERT_TRUE(server) << server.error().message;
  EXPECT_TRUE(Connects("127.0.0.2", (*server)->port()));
  EXPECT_FALSE(Connects("127.0.0.1", (*server)->port()));
}

// Another node on the master's host (two agents on one machine) is group rank 1: the others
// check its store at the address it reports, never at the master's.
TEST(AgentStore, AnotherNodeOnTheMastersHostListensWhereItReportsItself) {
  boost::asio::io_context io;
  auto server = StartAgentStore(io, Static(1, "127.0.0.2", "127.0.0.1"), "localhost", {});
  ASSERT_TRUE(server) << server.error().message;
  EXPECT_TRUE(Connects("127.0.0.1", (*server)->port()));
  EXPECT_FALSE(Connects("127.0.0.2", (*server)->port()));
}

TEST(AgentStore, TheHostSettingOverridesWhereItListens) {
  boost::asio::io_context io;
  auto server = StartAgentStore(io, Static(0, "127.0.0.2", ""), "localhost", {.host = "127.0.0.3"});
  ASSERT_TRUE(server) << server.error().message;
  EXPECT_TRUE(Connects("127.0.0.3", (*server)->port()));
  EXPECT_FALSE(Connects("127.0.0.2", (*server)->port()));
}

}  // namespace
}  // namespace ftrun::launcher
