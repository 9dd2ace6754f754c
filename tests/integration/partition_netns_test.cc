// A network partition between two nodes that both still reach `ftrun master`: network
// namespaces the test creates (m for the master, a, b, c and d for the agents), a veth pair from
// m to each, m forwarding. The agents have no route to each other until the test adds them
// (Route; the partition heals). Skips, saying why, where namespaces cannot be created.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/support/etcd_cluster.h"
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

class Partition : public ::testing::Test {
 protected:
  void SetUp() override {
    const int id = ::getpid() % 10000;
    const std::string p = "ftp" + std::to_string(id);
    m_ = p + "m";
    a_ = p + "a";
    b_ = p + "b";
    c_ = p + "c";
    d_ = p + "d";
    const std::string x = std::to_string(id % 250);
    net_a_ = "10.78." + x + ".";
    net_b_ = "10.79." + x + ".";
    net_c_ = "10.80." + x + ".";
    net_d_ = "10.77." + x + ".";
    std::string err;
    if (::access("/usr/sbin/ip", X_OK) != 0) GTEST_SKIP() << "iproute2 (ip) is not installed";
    if (Ip({"netns", "add", m_}, &err) != 0) {
      GTEST_SKIP() << "cannot create network namespaces here: " << err;
    }
    created_ = true;
    std::vector<std::vector<std::string>> steps = {{"-n", m_, "link", "set", "lo", "up"}};
    for (const auto& [ns, net] :
         {std::pair{a_, net_a_}, {b_, net_b_}, {c_, net_c_}, {d_, net_d_}}) {
      const std::string to = p + "m" + ns.back(), from = p + ns.back() + "m";
      const std::vector<std::vector<std::string>> link = {
          {"netns", "add", ns},
          {"link", "add", to, "type", "veth", "peer", "name", from},
          {"link", "set", to, "netns", m_},
          {"link", "set", from, "netns", ns},
          {"-n", m_, "addr", "add", net + "1/24", "dev", to},
          {"-n", ns, "addr", "add", net + "2/24", "dev", from},
          {"-n", m_, "link", "set", to, "up"},
          {"-n", ns, "link", "set", from, "up"},
          {"-n", ns, "link", "set", "lo", "up"},
      };
      steps.insert(steps.end(), link.begin(), link.end());
    }
    for (const auto& s : steps) ASSERT_EQ(Ip(s, &err), 0) << err;
    ChildRun fwd("/usr/sbin/ip", {"netns", "exec", m_, "sysctl", "-qw", "net.ipv4.ip_forward=1"});
    ASSERT_EQ(fwd.Wait(10s).exit_code, 0);
  }
  void TearDown() override {
    if (!created_) return;
    for (const auto& ns : {m_, a_, b_, c_, d_}) Ip({"netns", "del", ns});
  }
  // Routes between two agents' namespaces, through m (the partition between them heals).
  void Route(const std::string& x, const std::string& net_x, const std::string& y,
             const std::string& net_y) {
    std::string err;
    ASSERT_EQ(Ip({"-n", x, "route", "add", net_y + "0/24", "via", net_x + "1"}, &err), 0) << err;
    ASSERT_EQ(Ip({"-n", y, "route", "add", net_x + "0/24", "via", net_y + "1"}, &err), 0) << err;
  }
  void Heal() { Route(a_, net_a_, b_, net_b_); }
  std::unique_ptr<ChildRun> In(const std::string& ns, std::vector<std::string> args) {
    args.insert(args.begin(), {"netns", "exec", ns, FtrunBinary()});
    return std::make_unique<ChildRun>("/usr/sbin/ip", args);
  }
  // An agent whose rendezvous is `ftrun master` in m, or with `etcd` the etcd member there.
  std::unique_ptr<ChildRun> Agent(const std::string& ns, const std::string& net,
                                  const std::string& nnodes = "2", bool etcd = false) {
    return In(
        ns, {"--nnodes",         nnodes,
             "--nproc-per-node", "1",
             "--rdzv-backend",   etcd ? "etcd-v3" : "c10d",
             "--rdzv-endpoint",  net + (etcd ? "1:2379" : "1:29400"),
             "--rdzv-id",        "part",
             "--rdzv-conf",      etcd ? "last_call_timeout=0.5" : "is_host=0,last_call_timeout=0.5",
             "--local-addr",     net + "2",
             "--log-dir",        dir_ / ("logs-" + ns),
             "--no-python",      FakeWorkerBinary(),
             "record",           dir_ / "records",
             "connect-master",   "pidfile",
             dir_ / "connected", "wait-file",
             dir_ / "go"});
  }

  // `ftrun master` in m for `nnodes` nodes, once it listens (null otherwise: the test fails).
  std::unique_ptr<ChildRun> Master(const std::string& nnodes, const std::string& max_restarts) {
    auto master = In(m_, {"master", "--port", "29400", "--nnodes", nnodes, "--rdzv-id", "part",
                          "--max-restarts", max_restarts, "--event-log", dir_ / "events"});
    const bool up =
        WaitFor([&] { return master->Err().find("listening") != std::string::npos; }, 10s);
    EXPECT_TRUE(up) << master->Err();
    return up ? std::move(master) : nullptr;
  }
  // One etcd member in m, serving the agents of a, b and c on m's end of their links (its
  // peer URL on m's loopback), once it answers (null otherwise: the test fails).
  std::unique_ptr<ChildRun> Etcd() {
    std::string clients;
    for (const auto& net : {net_a_, net_b_, net_c_}) {
      clients += (clients.empty() ? "" : ",") + std::string("http://") + net + "1:2379";
    }
    auto etcd = std::make_unique<ChildRun>(
        "/usr/sbin/ip",
        std::vector<std::string>{
            "netns", "exec", m_, "/usr/bin/etcd", "--name", "m", "--data-dir", dir_ / "etcd",
            "--listen-client-urls", clients, "--advertise-client-urls", clients,
            "--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls",
            "http://127.0.0.1:2380", "--initial-cluster", "m=http://127.0.0.1:2380"});
    const bool up = WaitFor(
        [&] { return etcd->Err().find("serving insecure client requests") != std::string::npos; },
        20s);
    EXPECT_TRUE(up) << etcd->Err();
    return up ? std::move(etcd) : nullptr;
  }
  // The master's "partition detected" lines that name the agents of networks x and y.
  static int PairPartitions(const ChildRun& master, const std::string& net_x,
                            const std::string& net_y) {
    int n = 0;
    for (const auto& l : Lines(master.Err())) {
      n += l.find("partition detected") != std::string::npos &&
           l.find(net_x + "2") != std::string::npos && l.find(net_y + "2") != std::string::npos;
    }
    return n;
  }

  std::string m_, a_, b_, c_, d_, net_a_, net_b_, net_c_, net_d_;
  bool created_ = false;
  TempDir dir_;
};

TEST_F(Partition, IsNamedBacksOffSpendsNoRestartAndTheJobGoesOnOnceItHeals) {
  std::filesystem::create_directories(dir_ / "connected");
  auto master = In(m_, {"master", "--port", "29400", "--nnodes", "2", "--rdzv-id", "part",
                        "--max-restarts", "1", "--event-log", dir_ / "events"});
  ASSERT_TRUE(WaitFor([&] { return master->Err().find("listening") != std::string::npos; }, 10s))
      << master->Err();
  // a joins first: it is group rank 0 and hosts the workers' store, which b cannot reach.
  auto a = Agent(a_, net_a_);
  ASSERT_TRUE(WaitFor([&] { return a->Err().find("joined the job") != std::string::npos; }, 20s))
      << a->Err();
  auto b = Agent(b_, net_b_);
  const std::string named = "cannot reach node ";
  auto partitions = [&] {
    int n = 0;
    for (const auto& l : Lines(master->Err()))
      n += l.find("partition detected") != std::string::npos;
    return n;
  };
  // Found, named (b's address and a's: each checks the other, either may report first), and
  // found again after a longer wait.
  ASSERT_TRUE(WaitFor([&] { return partitions() >= 2; }, 60s)) << master->Err() << b->Err();
  const std::string log = master->Err();
  EXPECT_TRUE(log.find("at " + net_b_ + "2 cannot reach node ") != std::string::npos ||
              log.find("at " + net_a_ + "2 cannot reach node ") != std::string::npos)
      << log;
  EXPECT_TRUE(
      log.find("at " + net_a_ + "2 (group rank 0's store " + net_a_ + "2:") != std::string::npos ||
      log.find("at " + net_b_ + "2 (group rank 1's store " + net_b_ + "2:") != std::string::npos)
      << log;
  EXPECT_NE(log.find("the next one waits 1s"), std::string::npos) << log;
  EXPECT_NE(log.find("the next one waits 2s"), std::string::npos) << log;
  EXPECT_NE((a->Err() + b->Err()).find("this node cannot reach group rank "), std::string::npos)
      << a->Err() << b->Err();
  EXPECT_NE(ReadFile(dir_ / "events").find("\"event\":\"partition\""), std::string::npos)
      << ReadFile(dir_ / "events");
  // The master's log gives each round's real size.
  EXPECT_NE(log.find("nodes=2 restart_count=0 world_size=2"), std::string::npos) << log;
  // Both agents are still in the job; the network heals, and the job finishes.
  // Until then b's worker could not reach the store (as a real worker's init would hang).
  EXPECT_FALSE(FileExists(dir_ / "connected/1.pid"));
  Heal();
  // The next round (after the back-off) runs with both nodes: both workers reach the store.
  ASSERT_TRUE(WaitFor(
      [&] { return FileExists(dir_ / "connected/0.pid") && FileExists(dir_ / "connected/1.pid"); },
      60s))
      << master->Err();
  std::ofstream(dir_ / "go") << "";
  auto ra = a->Wait(60s), rb = b->Wait(60s), rm = master->Wait(60s);
  EXPECT_EQ(ra.exit_code, 0) << ra.err;
  EXPECT_EQ(rb.exit_code, 0) << rb.err;
  EXPECT_EQ(rm.exit_code, 0) << rm.err;
  EXPECT_EQ(rm.err.find("restart 1/1"), std::string::npos) << "no restart was spent" << rm.err;
  EXPECT_EQ(rb.err.find("Worker group FAILED"), std::string::npos) << rb.err;
}

// b and c (neither group rank 0) cannot reach each other; both reach a (group rank 0) and the
// master. Their agents check each other's stores (ring neighbours), and the master names the
// pair, spends no restart (--max-restarts 0: one spent would fail the job), backs off, and the
// job completes once the network heals.
TEST_F(Partition, BetweenTwoNodesThatAreNotGroupRankZeroIsNamedToo) {
  std::filesystem::create_directories(dir_ / "connected");
  Route(a_, net_a_, b_, net_b_);
  Route(a_, net_a_, c_, net_c_);
  auto master = Master("3", "0");
  ASSERT_TRUE(master);
  auto a = Agent(a_, net_a_, "3");  // joins first: group rank 0
  ASSERT_TRUE(WaitFor([&] { return a->Err().find("joined the job") != std::string::npos; }, 20s))
      << a->Err();
  auto b = Agent(b_, net_b_, "3");
  auto c = Agent(c_, net_c_, "3");
  ASSERT_TRUE(WaitFor([&] { return PairPartitions(*master, net_b_, net_c_) >= 2; }, 60s))
      << master->Err() << b->Err() << c->Err();
  const std::string log = master->Err();
  EXPECT_EQ(log.find("group rank 0's store"), std::string::npos) << "a is reached by both: " << log;
  EXPECT_NE(log.find("the next one waits 1s"), std::string::npos) << log;
  EXPECT_NE(log.find("the next one waits 2s"), std::string::npos) << log;
  const std::string events = ReadFile(dir_ / "events");
  EXPECT_NE(events.find("\"event\":\"partition\""), std::string::npos) << events;
  EXPECT_NE(events.find("\"to_rank\":"), std::string::npos) << events;
  EXPECT_NE((b->Err() + c->Err()).find("this node cannot reach group rank "), std::string::npos)
      << b->Err() << c->Err();
  Route(b_, net_b_, c_, net_c_);
  std::ofstream(dir_ / "go") << "";
  auto ra = a->Wait(90s), rb = b->Wait(90s), rc = c->Wait(90s), rm = master->Wait(60s);
  EXPECT_EQ(ra.exit_code, 0) << ra.err;
  EXPECT_EQ(rb.exit_code, 0) << rb.err;
  EXPECT_EQ(rc.exit_code, 0) << rc.err;
  EXPECT_EQ(rm.exit_code, 0) << rm.err;
  EXPECT_NE(rm.err.find("nodes=3 restart_count=0 world_size=3"), std::string::npos) << rm.err;
}

// Four nodes joined in order a, b, c, d (group ranks 0-3): b and d are not ring neighbours
// (1's are 0 and 2, 3's are 2 and 0) and neither is group rank 0, yet with every other route
// up the master names that pair, spends no restart (--max-restarts 0) and the job completes
// once it heals.
TEST_F(Partition, BetweenTwoNodesThatAreNotRingNeighboursIsNamed) {
  std::filesystem::create_directories(dir_ / "connected");
  Route(a_, net_a_, b_, net_b_);
  Route(a_, net_a_, c_, net_c_);
  Route(a_, net_a_, d_, net_d_);
  Route(b_, net_b_, c_, net_c_);
  Route(c_, net_c_, d_, net_d_);
  auto master = Master("4", "0");
  ASSERT_TRUE(master);
  std::vector<std::unique_ptr<ChildRun>> agents;
  for (const auto& [ns, net] : {std::pair{a_, net_a_}, {b_, net_b_}, {c_, net_c_}, {d_, net_d_}}) {
    agents.push_back(Agent(ns, net, "4"));
    ChildRun& agent = *agents.back();
    ASSERT_TRUE(
        WaitFor([&] { return agent.Err().find("joined the job") != std::string::npos; }, 20s))
        << agent.Err();
  }
  ASSERT_TRUE(WaitFor([&] { return PairPartitions(*master, net_b_, net_d_) >= 1; }, 60s))
      << master->Err();
  const std::string log = master->Err();
  EXPECT_NE(log.find("nodes=4 restart_count=0 world_size=4"), std::string::npos) << log;
  EXPECT_TRUE(log.find("group rank 1's store " + net_b_ + "2:") != std::string::npos ||
              log.find("group rank 3's store " + net_d_ + "2:") != std::string::npos)
      << log;
  Route(b_, net_b_, d_, net_d_);
  std::ofstream(dir_ / "go") << "";
  for (size_t i = 0; i < agents.size(); ++i) {
    auto r = agents[i]->Wait(90s);
    EXPECT_EQ(r.exit_code, 0) << "agent " << i << ": " << r.err;
  }
  auto rm = master->Wait(60s);
  EXPECT_EQ(rm.exit_code, 0) << rm.err;
}

// The same partition (b and c, neither group rank 0) with the rendezvous in etcd: the agents
// check each other's stores as with `ftrun master`, the agent leading the rendezvous names the
// pair, no restart is spent (--max-restarts 0) and the job completes once the network heals.
TEST_F(Partition, WithTheRendezvousInEtcdIsNamedToo) {
  if (!EtcdCluster::Available()) GTEST_SKIP() << "etcd (Debian's etcd-server) is not installed";
  std::filesystem::create_directories(dir_ / "connected");
  Route(a_, net_a_, b_, net_b_);
  Route(a_, net_a_, c_, net_c_);
  auto etcd = Etcd();
  ASSERT_TRUE(etcd);
  std::vector<std::unique_ptr<ChildRun>> agents;
  for (const auto& [ns, net] : {std::pair{a_, net_a_}, {b_, net_b_}, {c_, net_c_}}) {
    agents.push_back(Agent(ns, net, "3", /*etcd=*/true));
  }
  auto logs = [&] {
    std::string all;
    for (const auto& a : agents) all += a->Err();
    return all;
  };
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const auto& a : agents) {
          if (PairPartitions(*a, net_b_, net_c_) >= 1) return true;
        }
        return false;
      },
      90s))
      << logs();
  EXPECT_NE(logs().find("this node cannot reach group rank "), std::string::npos) << logs();
  Route(b_, net_b_, c_, net_c_);
  std::ofstream(dir_ / "go") << "";
  for (size_t i = 0; i < agents.size(); ++i) {
    auto r = agents[i]->Wait(90s);
    EXPECT_EQ(r.exit_code, 0) << "agent " << i << ": " << r.err;
    EXPECT_EQ(r.err.find("restart 1/"), std::string::npos) << "no restart was spent: " << r.err;
  }
}

}  // namespace
}  // namespace ftrun::testing
