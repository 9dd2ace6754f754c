// Two agents in their own network namespaces (ip netns + a veth pair the test creates), so
// each node has its own address, as on a real cluster. Skips, saying why, where namespaces
// cannot be created (not root, no iproute2).
#include <gtest/gtest.h>
#include <unistd.h>

#include "tests/support/test_support.h"

namespace ftrun::testing {
namespace {

using namespace std::chrono_literals;

int Ip(const std::vector<std::string>& args, std::string* err = nullptr) {
  ChildRun run("/usr/sbin/ip", args);
  auto r = run.Wait(10s);
  if (err) *err = r.err;
  return r.exit_code;
}

class NetNs : public ::testing::Test {
 protected:
  void SetUp() override {
    const int id = ::getpid() % 10000;
    a_ = "ftrun" + std::to_string(id) + "a";
    b_ = "ftrun" + std::to_string(id) + "b";
    subnet_ = "10.77." + std::to_string(id % 250) + ".";
    std::string err;
    if (::access("/usr/sbin/ip", X_OK) != 0) GTEST_SKIP() << "iproute2 (ip) is not installed";
    if (Ip({"netns", "add", a_}, &err) != 0) {
      GTEST_SKIP() << "cannot create network namespaces here: " << err;
    }
    created_ = true;
    const std::vector<std::vector<std::string>> steps = {
        {"netns", "add", b_},
        {"link", "add", a_, "type", "veth", "peer", "name", b_},
        {"link", "set", a_, "netns", a_},
        {"link", "set", b_, "netns", b_},
        {"-n", a_, "addr", "add", subnet_ + "1/24", "dev", a_},
        {"-n", b_, "addr", "add", subnet_ + "2/24", "dev", b_},
        {"-n", a_, "link", "set", a_, "up"},
        {"-n", b_, "link", "set", b_, "up"},
        {"-n", a_, "link", "set", "lo", "up"},
        {"-n", b_, "link", "set", "lo", "up"},
    };
    for (const auto& s : steps) ASSERT_EQ(Ip(s, &err), 0) << err;
  }
  void TearDown() override {
    if (!created_) return;
    Ip({"netns", "del", a_});
    Ip({"netns", "del", b_});
  }
  // `ip netns exec <ns> ftrun <args>`
  std::unique_ptr<ChildRun> Agent(const std::string& ns, std::vector<std::string> args) {
    args.insert(args.begin(), {"netns", "exec", ns, FtrunBinary()});
    return std::make_unique<ChildRun>("/usr/sbin/ip", args);
  }
  // Workers record their view; --role tells which namespace a record came from.
  std::vector<std::string> Worker(const std::string& ns) {
    return {"--log-dir", dir_ / "logs", "--nproc-per-node", "2",      "--role",
            ns,          "--no-python", FakeWorkerBinary(), "record", dir_ / "records"};
  }
  // Every worker sees WORLD_SIZE 4 and, as MASTER_ADDR, the address of the namespace whose
  // node is group rank 0.
  void ExpectFourWorkersWithRankZeroAsMaster() {
    auto lines = Lines(ReadFile(dir_ / "records"));
    ASSERT_EQ(lines.size(), 4u) << ReadFile(dir_ / "records");
    std::string master;
    for (const auto& l : lines) {
      if (l.find("group=0 ") != std::string::npos) {
        master = subnet_ + (l.find("role=" + a_) != std::string::npos ? "1" : "2");
      }
    }
    for (const auto& l : lines) {
      EXPECT_NE(l.find("world=4"), std::string::npos) << l;
      EXPECT_NE(l.find("master=" + master + ":"), std::string::npos) << l;
    }
  }

  std::string a_, b_, subnet_;
  bool created_ = false;
  TempDir dir_;
};

TEST_F(NetNs, StaticRendezvousAcrossNamespaces) {
  auto opts = [&](int rank, const std::string& self) {
    std::vector<std::string> o = {
        "--nnodes",      "2",           "--node-rank",   std::to_string(rank),
        "--master-addr", subnet_ + "1", "--master-port", "29500",
        "--local-addr",  self};
    auto w = Worker(rank == 0 ? a_ : b_);
    o.insert(o.end(), w.begin(), w.end());
    return o;
  };
  auto n1 = Agent(b_, opts(1, subnet_ + "2"));
  auto n0 = Agent(a_, opts(0, subnet_ + "1"));
  auto r0 = n0->Wait(30s), r1 = n1->Wait(30s);
  ASSERT_EQ(r0.exit_code, 0) << r0.err;
  ASSERT_EQ(r1.exit_code, 0) << r1.err;
  ExpectFourWorkersWithRankZeroAsMaster();
  EXPECT_NE(ReadFile(dir_ / "records").find("group=0 world=4 attempt=0 master=" + subnet_ + "1:"),
            std::string::npos)
      << "static: node rank 0 is group rank 0";
}

TEST_F(NetNs, DynamicRendezvousHostedWhereTheEndpointLives) {
  auto opts = [&](const std::string& ns, const std::string& self) {
    std::vector<std::string> o = {
        "--nnodes",  "2",  "--rdzv-backend", "c10d", "--rdzv-endpoint", subnet_ + "1:29400",
        "--rdzv-id", "ns", "--local-addr",   self};
    auto w = Worker(ns);
    o.insert(o.end(), w.begin(), w.end());
    return o;
  };
  auto nb = Agent(b_, opts(b_, subnet_ + "2"));
  auto na = Agent(a_, opts(a_, subnet_ + "1"));
  auto ra = na->Wait(30s), rb = nb->Wait(30s);
  ASSERT_EQ(ra.exit_code, 0) << ra.err;
  ASSERT_EQ(rb.exit_code, 0) << rb.err;
  EXPECT_NE(ra.err.find("rendezvous server listening"), std::string::npos) << ra.err;
  EXPECT_EQ(rb.err.find("rendezvous server listening"), std::string::npos) << rb.err;
  ExpectFourWorkersWithRankZeroAsMaster();  // ranks follow the order of joining
}

}  // namespace
}  // namespace ftrun::testing
