// Several real ftrun agents on loopback forming one job: static and dynamic rendezvous,
// scale up and down, job-wide restarts, refusals, `ftrun master`.
#include <gtest/gtest.h>
#include <signal.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <fstream>
#include <memory>

#include "launcher/config/host.h"
#include "tests/support/test_support.h"

namespace ftrun::testing {
namespace {

using namespace std::chrono_literals;

class MultiNode : public ::testing::Test {
 protected:
  void SetUp() override { port_ = std::to_string(TestPort()); }

  // ftrun <rendezvous options> <options> --no-python fake_worker <actions>
  std::vector<std::string> Cmd(std::vector<std::string> options,
                               const std::vector<std::string>& actions) {
    return FakeWorkerJob({"--log-dir", dir_ / "logs", "--nproc-per-node", "2"}, options, actions);
  }
  std::vector<std::string> Static(int node_rank, std::vector<std::string> extra = {}) {
    std::vector<std::string> o = {
        "--nnodes",      "2",         "--node-rank",   std::to_string(node_rank),
        "--master-addr", "127.0.0.1", "--master-port", port_};
    o.insert(o.end(), extra.begin(), extra.end());
    return o;
  }
  std::vector<std::string> Dynamic(const std::string& nnodes, std::vector<std::string> extra = {}) {
    std::vector<std::string> o = {
        "--nnodes",  nnodes, "--rdzv-backend", "c10d",   "--rdzv-endpoint", "127.0.0.1:" + port_,
        "--rdzv-id", "job",  "--rdzv-conf",    kFastConf};
    o.insert(o.end(), extra.begin(), extra.end());
    return o;
  }
  std::vector<std::string> Records() { return Lines(ReadFile(dir_ / "records")); }
  int Count(const std::string& needle) {
    int n = 0;
    for (const auto& l : Records()) n += l.find(needle) != std::string::npos;
    return n;
  }

  static constexpr const char* kFastConf =
      "last_call_timeout=0.5,keep_alive_interval=0.5,keep_alive_max_attempt=4";
  TempDir dir_;
  std::string port_;
};

TEST_F(MultiNode, StaticTwoNodesRanksAndEnvironment) {
  ChildRun n1(FtrunBinary(), Cmd(Static(1), {"env", dir_ / "env"}));
  ChildRun n0(FtrunBinary(), Cmd(Static(0), {"env", dir_ / "env"}));
  auto r0 = n0.Wait(30s), r1 = n1.Wait(30s);
  ASSERT_EQ(r0.exit_code, 0) << r0.err;
  ASSERT_EQ(r1.exit_code, 0) << r1.err;
  std::string port;
  for (int rank = 0; rank < 4; ++rank) {
    auto env = ParseEnvFile(dir_ / ("env." + std::to_string(rank)));
    EXPECT_EQ(env["WORLD_SIZE"], "4");
    EXPECT_EQ(env["GROUP_WORLD_SIZE"], "2");
    EXPECT_EQ(env["GROUP_RANK"], std::to_string(rank / 2));
    EXPECT_EQ(env["LOCAL_RANK"], std::to_string(rank % 2));
    EXPECT_EQ(env["ROLE_RANK"], std::to_string(rank));
    EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "2");
    EXPECT_EQ(env["MASTER_ADDR"], "127.0.0.1");
    if (rank == 0) port = env["MASTER_PORT"];
    EXPECT_EQ(env["MASTER_PORT"], port) << "one MASTER_PORT per round, for every node";
    EXPECT_NE(env["MASTER_PORT"], port_) << "not the agent's own port";
  }
}

TEST_F(MultiNode, StaticNodeWaitsForNodeZeroWithLogLines) {
  auto r = RunFtrun(Cmd(Static(1, {"--rdzv-conf", "timeout=1.5"}), {"exit", "0"}), {}, 30s);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("waiting for the rendezvous server at 127.0.0.1:" + port_),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("cannot join the rendezvous at 127.0.0.1:" + port_ + " within timeout=1.5s"),
            std::string::npos)
      << r.err;
}

TEST_F(MultiNode, RankCrashOnNodeOneRestartsBothNodesWithTheSameCount) {
  std::vector<std::string> w = {
      "record", dir_ / "records", "if-attempt", "0",     "if-rank", "2", "exit",
      "3",      "if-attempt",     "0",          "sleep", "30"};
  ChildRun n0(FtrunBinary(), Cmd(Static(0, {"--max-restarts", "2"}), w));
  ChildRun n1(FtrunBinary(), Cmd(Static(1, {"--max-restarts", "2"}), w));
  auto r0 = n0.Wait(60s), r1 = n1.Wait(60s);
  EXPECT_EQ(r0.exit_code, 0) << r0.err;
  EXPECT_EQ(r1.exit_code, 0) << r1.err;
  EXPECT_EQ(Count("attempt=1"), 4) << ReadFile(dir_ / "records");
  EXPECT_EQ(Count("attempt=2"), 0);
  for (const auto* err : {&r0.err, &r1.err}) {
    EXPECT_NE(err->find("Worker group FAILED. 2/2 attempts left"), std::string::npos) << *err;
  }
}

TEST_F(MultiNode, FinalFailureReachesEveryNodeAtOnce) {
  std::vector<std::string> w = {"if-rank", "3", "exit", "7", "sleep", "60"};
  ChildRun n0(FtrunBinary(), Cmd(Static(0), w));
  ChildRun n1(FtrunBinary(), Cmd(Static(1), w));
  auto r0 = n0.Wait(30s), r1 = n1.Wait(30s);
  for (const auto* r : {&r0, &r1}) {
    EXPECT_FALSE(r->timed_out);
    EXPECT_EQ(r->exit_code, 1) << r->err;
    EXPECT_NE(r->err.find("Root Cause (first observed failure):"), std::string::npos) << r->err;
    EXPECT_NE(r->err.find("  rank      : 3 (local_rank: 1)"), std::string::npos) << r->err;
    EXPECT_NE(r->err.find("  exitcode  : 7 (pid: "), std::string::npos) << r->err;
  }
}

TEST_F(MultiNode, DynamicRanksFollowJoinOrderAndMasterIsRankZero) {
  ChildRun a(FtrunBinary(),
             Cmd(Dynamic("2", {"--local-addr", "127.0.0.1"}), {"record", dir_ / "records"}));
  ASSERT_TRUE(WaitFor([&] { return a.Err().find("joined the job") != std::string::npos; }, 10s));
  ChildRun b(FtrunBinary(),
             Cmd(Dynamic("2", {"--local-addr", "127.0.0.2"}), {"record", dir_ / "records"}));
  auto ra = a.Wait(30s), rb = b.Wait(30s);
  ASSERT_EQ(ra.exit_code, 0) << ra.err;
  ASSERT_EQ(rb.exit_code, 0) << rb.err;
  EXPECT_EQ(Count("world=4"), 4) << ReadFile(dir_ / "records");
  EXPECT_EQ(Count("group=0 world=4"), 2);
  EXPECT_EQ(Count("master=127.0.0.1:"), 4) << "MASTER_ADDR is the group rank 0 node's address";
}

TEST_F(MultiNode, ScaleUpStartsANewRoundWithoutSpendingARestart) {
  std::vector<std::string> w = {"record", dir_ / "records", "wait-file", dir_ / "done"};
  ChildRun a(FtrunBinary(), Cmd(Dynamic("1:2"), w));
  ASSERT_TRUE(WaitFor([&] { return Count("world=2") == 2; }, 20s)) << a.Err();
  ChildRun b(FtrunBinary(), Cmd(Dynamic("1:2"), w));
  ASSERT_TRUE(WaitFor([&] { return Count("world=4") == 4; }, 20s)) << a.Err() << b.Err();
  EXPECT_EQ(Count("attempt=0"), 6) << "the membership change spent no restart";
  std::ofstream(dir_ / "done") << "";
  auto ra = a.Wait(30s), rb = b.Wait(30s);
  EXPECT_EQ(ra.exit_code, 0) << ra.err;
  EXPECT_EQ(rb.exit_code, 0) << rb.err;
}

TEST_F(MultiNode, ScaleDownWhenAnAgentIsKilled) {
  std::vector<std::string> w = {"record",    dir_ / "records", "pidfile",
                                dir_.path(), "wait-file",      dir_ / "done"};
  ChildRun a(FtrunBinary(), Cmd(Dynamic("1:2"), w));
  ASSERT_TRUE(WaitFor([&] { return Count("world=2") == 2; }, 20s)) << a.Err();
  ChildRun b(FtrunBinary(), Cmd(Dynamic("1:2"), w));
  ASSERT_TRUE(WaitFor([&] { return Count("world=4") == 4; }, 20s)) << a.Err() << b.Err();
  pid_t b_worker = ReadPid(dir_ / "3.pid");
  b.Signal(SIGKILL);
  b.Wait(10s);
  EXPECT_TRUE(WaitFor([&] { return !ProcessAlive(b_worker); }, 10s));
  // The survivor re-forms alone: a third round of two workers, still no restart spent.
  ASSERT_TRUE(WaitFor([&] { return Count("world=2") == 4; }, 20s)) << a.Err();
  EXPECT_EQ(Count("attempt=0"), 8);
  std::ofstream(dir_ / "done") << "";
  auto ra = a.Wait(30s);
  EXPECT_EQ(ra.exit_code, 0) << ra.err;
  // The server notices the loss by the dropped connection or, when no call of that node was
  // in flight at the kill (its watch just answered), by its not watching again: not by the
  // liveness timeout's silence.
  EXPECT_NE(ra.err.find("lost (disconnected"), std::string::npos) << ra.err;
}

TEST_F(MultiNode, BelowMinTheJobWaitsForJoinTimeoutThenFailsSayingSo) {
  // join_timeout also bounds the first round, which b must join in time: a sanitized ftrun
  // under load took longer than 1.5 s to start.
  std::vector<std::string> conf = {"--rdzv-conf", std::string(kFastConf) + ",join_timeout=5"};
  std::vector<std::string> w = {"record", dir_ / "records", "sleep", "60"};
  ChildRun a(FtrunBinary(), Cmd(Dynamic("2", conf), w));  // a hosts: it starts first
  ASSERT_TRUE(WaitFor([&] { return a.Err().find("joined the job") != std::string::npos; }, 20s));
  ChildRun b(FtrunBinary(), Cmd(Dynamic("2", conf), w));
  ASSERT_TRUE(WaitFor([&] { return Count("world=4") == 4; }, 20s)) << a.Err();
  b.Signal(SIGKILL);
  b.Wait(10s);
  auto ra = a.Wait(30s);
  EXPECT_EQ(ra.exit_code, 1) << ra.err;
  EXPECT_NE(ra.err.find("did not complete within join_timeout=5s: 1 node(s) joined, --nnodes "
                        "is 2"),
            std::string::npos)
      << ra.err;
}

TEST_F(MultiNode, SpareWaitsAtMaxAndFillsTheGap) {
  std::vector<std::string> w = {"record", dir_ / "records", "wait-file", dir_ / "done"};
  ChildRun a(FtrunBinary(), Cmd(Dynamic("1:2"), w));  // a hosts the rendezvous: it starts first
  ASSERT_TRUE(WaitFor([&] { return a.Err().find("joined the job") != std::string::npos; }, 20s));
  ChildRun b(FtrunBinary(), Cmd(Dynamic("1:2"), w));
  ASSERT_TRUE(WaitFor([&] { return Count("world=4") == 4; }, 20s)) << a.Err() << b.Err();
  ChildRun spare(FtrunBinary(), Cmd(Dynamic("1:2", {"--role", "spare"}), w));
  ASSERT_TRUE(
      WaitFor([&] { return spare.Err().find("joined the job") != std::string::npos; }, 20s));
  EXPECT_EQ(Count("role=spare"), 0) << "a spare does not disturb a full round";
  b.Signal(SIGKILL);
  b.Wait(10s);
  ASSERT_TRUE(WaitFor([&] { return Count("world=4 attempt=0") == 8; }, 20s))
      << a.Err() << spare.Err();
  EXPECT_EQ(Count("role=spare"), 2);
  std::ofstream(dir_ / "done") << "";
  EXPECT_EQ(a.Wait(30s).exit_code, 0);
  EXPECT_EQ(spare.Wait(30s).exit_code, 0);
}

TEST_F(MultiNode, TokenMismatchIsRejected) {
  ChildRun a(FtrunBinary(), Cmd(Static(0, {"--rdzv-conf", "token=right"}), {"sleep", "30"}));
  auto rb = RunFtrun(Cmd(Static(1, {"--rdzv-conf", "token=wrong"}), {"exit", "0"}), {}, 30s);
  EXPECT_EQ(rb.exit_code, 1) << rb.err;
  EXPECT_NE(rb.err.find("refused this node: missing or wrong job token"), std::string::npos)
      << rb.err;
  a.Signal(SIGTERM);
  auto ra = a.Wait(30s);
  EXPECT_NE(ra.err.find("rejected join"), std::string::npos) << ra.err;
}

TEST_F(MultiNode, MismatchedExpectationsNameBothValues) {
  ChildRun a(FtrunBinary(), Cmd(Dynamic("2"), {"sleep", "30"}));
  ASSERT_TRUE(WaitFor([&] { return a.Err().find("joined the job") != std::string::npos; }, 10s));
  auto nnodes = RunFtrun(Cmd(Dynamic("2:3"), {"exit", "0"}), {}, 30s);
  EXPECT_EQ(nnodes.exit_code, 1);
  EXPECT_NE(nnodes.err.find("--nnodes 2:3 on "), std::string::npos) << nnodes.err;
  EXPECT_NE(nnodes.err.find("differs from the server's 2:2"), std::string::npos) << nnodes.err;
  auto nproc = RunFtrun(Cmd(Dynamic("2", {"--nproc-per-node", "3"}), {"exit", "0"}), {}, 30s);
  EXPECT_EQ(nproc.exit_code, 1);
  EXPECT_NE(nproc.err.find("--nproc-per-node 3 on "), std::string::npos) << nproc.err;
  EXPECT_NE(nproc.err.find("differs from the job's 2"), std::string::npos) << nproc.err;
  auto run_id = RunFtrun(Cmd({"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                              "127.0.0.1:" + port_, "--rdzv-id", "other"},
                             {"exit", "0"}),
                         {}, 30s);
  EXPECT_EQ(run_id.exit_code, 1);
  EXPECT_NE(run_id.err.find("run id 'other' differs from the server's 'job'"), std::string::npos)
      << run_id.err;
  a.Signal(SIGTERM);
  a.Wait(30s);
}

TEST_F(MultiNode, StandaloneMasterServesTheJob) {
  ChildRun master(FtrunBinary(), {"master", "--port", port_, "--nnodes", "2", "--rdzv-id", "job",
                                  "--max-restarts", "1"});
  ASSERT_TRUE(WaitFor([&] { return master.Err().find("listening") != std::string::npos; }, 10s));
  std::vector<std::string> w = {
      "record", dir_ / "records", "if-attempt", "0",     "if-rank", "1", "exit",
      "1",      "if-attempt",     "0",          "sleep", "30"};
  ChildRun a(FtrunBinary(), Cmd(Dynamic("2"), w));
  ChildRun b(FtrunBinary(), Cmd(Dynamic("2"), w));
  auto ra = a.Wait(60s), rb = b.Wait(60s), rm = master.Wait(60s);
  EXPECT_EQ(ra.exit_code, 0) << ra.err;
  EXPECT_EQ(rb.exit_code, 0) << rb.err;
  EXPECT_EQ(rm.exit_code, 0) << rm.err;
  EXPECT_EQ(Count("attempt=1"), 4) << "the master's --max-restarts allowed one restart";
  EXPECT_NE(rm.err.find("job finished outcome=succeeded"), std::string::npos) << rm.err;
  // Neither agent hosted the server (the master holds the port).
  EXPECT_EQ(ra.err.find("rendezvous server listening"), std::string::npos);
}

TEST_F(MultiNode, ARestartedMasterIsRejoinedWithRoundAndRestartCountCarriedOn) {
  const std::vector<std::string> master_args = {"master", "--port",      port_,    "--nnodes",
                                                "2",      "--rdzv-id",   "job",    "--max-restarts",
                                                "3",      "--rdzv-conf", kFastConf};
  auto master = std::make_unique<ChildRun>(FtrunBinary(), master_args);
  ASSERT_TRUE(WaitFor([&] { return master->Err().find("listening") != std::string::npos; }, 10s));
  // Attempt 0: rank 1 fails (one restart spent); attempt 1 waits for "go".
  std::vector<std::string> w = {"record", dir_ / "records", "if-attempt", "0",         "if-rank",
                                "1",      "exit",           "1",          "wait-file", dir_ / "go"};
  const auto conf = Dynamic("2", {"--rdzv-conf", std::string(kFastConf) + ",is_host=0"});
  ChildRun a(FtrunBinary(), Cmd(conf, w));
  ChildRun b(FtrunBinary(), Cmd(conf, w));
  ASSERT_TRUE(WaitFor([&] { return Count("attempt=1") == 4; }, 30s)) << a.Err() << b.Err();
  // The master dies and is started again at once (as a Deployment would), with no state.
  master->Signal(SIGKILL);
  master->Wait(10s);
  master = std::make_unique<ChildRun>(FtrunBinary(), master_args);
  // The agents rejoin with the round their workers run; the new master takes it over, and
  // the restart spent still counts.
  ASSERT_TRUE(WaitFor(
      [&] {
        return master->Err().find("round rebuilt from the rejoining nodes") != std::string::npos;
      },
      30s))
      << a.Err() << master->Err();
  std::ofstream(dir_ / "go") << "";
  auto ra = a.Wait(30s), rb = b.Wait(30s), rm = master->Wait(30s);
  EXPECT_EQ(ra.exit_code, 0) << ra.err;
  EXPECT_EQ(rb.exit_code, 0) << rb.err;
  EXPECT_EQ(rm.exit_code, 0) << rm.err;
  EXPECT_NE(ra.err.find("the rendezvous server no longer knows this node"), std::string::npos)
      << ra.err;
  // The master's own view: 2 nodes of 2 ranks (a view of no node once said world_size=1).
  EXPECT_NE(rm.err.find("round rebuilt from the rejoining nodes round=1 nodes=2 restart_count=1 "
                        "world_size=4"),
            std::string::npos)
      << rm.err;
  EXPECT_LE(Count("attempt=0"), 4);  // the others may be stopped before they record
  EXPECT_EQ(Count("attempt=1"), 4) << "the workers of round 1 went on";
  EXPECT_EQ(Count("attempt=2"), 0) << "rejoining spent no restart";
}

TEST_F(MultiNode, PortInUseIsOneClearLine) {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor busy(
      io, {boost::asio::ip::tcp::v4(), static_cast<unsigned short>(std::stoi(port_))});
  auto r = RunFtrun(Cmd(Static(0), {"exit", "0"}), {}, 30s);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("cannot listen on port " + port_), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--master-port"), std::string::npos) << r.err;
}

TEST_F(MultiNode, LosingTheHostAgentFailsTheOthersQuickly) {
  std::vector<std::string> conf = {"--rdzv-conf",
                                   "keep_alive_interval=0.5,keep_alive_max_attempt=4"};
  ChildRun n0(FtrunBinary(), Cmd(Static(0, conf), {"pidfile", dir_.path(), "sleep", "60"}));
  ChildRun n1(FtrunBinary(), Cmd(Static(1, conf), {"pidfile", dir_.path(), "sleep", "60"}));
  ASSERT_TRUE(WaitFor([&] { return ReadPid(dir_ / "3.pid") > 0; }, 20s));
  n0.Signal(SIGKILL);
  auto r1 = n1.Wait(30s);
  EXPECT_EQ(r1.exit_code, 1) << r1.err;
  EXPECT_NE(r1.err.find("lost contact with the rendezvous server"), std::string::npos) << r1.err;
  EXPECT_FALSE(ProcessAlive(ReadPid(dir_ / "3.pid")));
}

TEST_F(MultiNode, SignalledHostAgentEndsTheJobForEveryone) {
  ChildRun n0(FtrunBinary(), Cmd(Static(0), {"pidfile", dir_.path(), "sleep", "60"}));
  ChildRun n1(FtrunBinary(), Cmd(Static(1), {"pidfile", dir_.path(), "sleep", "60"}));
  // Ranks 0-1 run on n0, 2-3 on n1: n0 must have started its workers, or it dies of the
  // signal as torchrun does.
  ASSERT_TRUE(
      WaitFor([&] { return ReadPid(dir_ / "1.pid") > 0 && ReadPid(dir_ / "3.pid") > 0; }, 20s));
  n0.Signal(SIGTERM);
  auto r1 = n1.Wait(30s), r0 = n0.Wait(30s);
  EXPECT_EQ(r0.exit_code, 1);
  EXPECT_EQ(r1.exit_code, 1) << r1.err;
  EXPECT_NE(r1.err.find("the agent hosting the rendezvous"), std::string::npos) << r1.err;
}

}  // namespace
}  // namespace ftrun::testing
