// Real ftrun agents forming jobs through a real etcd (1 member, or a 3-member cluster) on
// loopback: the job's semantics, the loss of etcd members (fail-over), etcd down for less and
// for more than the lease TTL, two run ids on one etcd, and a crashed job's keys.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <thread>

#include "launcher/config/host.h"
#include "tests/support/etcd_cluster.h"
#include "tests/support/test_support.h"

namespace ftrun::testing {
namespace {

using namespace std::chrono_literals;

constexpr const char* kPrefix = "/ftrun/rdzv/";

class EtcdRendezvous : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!EtcdCluster::Available()) GTEST_SKIP() << "etcd-server is not installed";
  }
  // ftrun --nnodes 2 --nproc-per-node 2 --rdzv-backend etcd ... --no-python fake_worker ...
  std::vector<std::string> Cmd(const std::string& endpoints, const std::string& run_id,
                               const std::vector<std::string>& actions,
                               std::vector<std::string> extra = {},
                               const std::string& conf = "last_call_timeout=0.5,lease_ttl=3",
                               const std::string& backend = "etcd") {
    std::vector<std::string> o = {"--nnodes",        "2",       "--rdzv-backend", backend,
                                  "--rdzv-endpoint", endpoints, "--rdzv-id",      run_id,
                                  "--rdzv-conf",     conf};
    o.insert(o.end(), extra.begin(), extra.end());
    return FakeWorkerJob({"--log-dir", dir_ / ("logs-" + run_id), "--nproc-per-node", "2"}, o,
                         actions);
  }
  std::vector<std::string> Records(const std::string& name = "records") {
    return Lines(ReadFile(dir_ / name));
  }
  int Count(const std::string& needle, const std::string& name = "records") {
    int n = 0;
    for (const auto& l : Records(name)) n += l.find(needle) != std::string::npos;
    return n;
  }
  bool WaitStarted(int workers, std::chrono::milliseconds timeout,
                   const std::string& name = "records") {
    return WaitFor([&] { return Count("attempt=0", name) >= workers; }, timeout);
  }
  // The job's test certificates (made on first use), the client's files among them, and a
  // one-member etcd over TLS that requires a client certificate.
  EtcdTlsFiles ClientTls() const {
    return {dir_ / "client.pem", dir_ / "client.key", dir_ / "ca.pem"};
  }
  std::unique_ptr<EtcdCluster> TlsEtcd() {
    EXPECT_TRUE(MakeTestCertificates(dir_.path()));
    return std::make_unique<EtcdCluster>(
        1, EtcdTlsFiles{dir_ / "server.pem", dir_ / "server.key", dir_ / "ca.pem"}, ClientTls());
  }

  TempDir dir_;
};

TEST_F(EtcdRendezvous, TwoNodesFormOneJobAndLeaveNoKeys) {
  EtcdCluster etcd(1);
  std::vector<std::string> w = {"record", dir_ / "records", "env", dir_ / "env"};
  ChildRun a(FtrunBinary(), Cmd(etcd.Endpoint(0), "job", w, {"--event-log", dir_ / "events.a"},
                                "last_call_timeout=0.5", "etcd-v2"));
  ChildRun b(FtrunBinary(), Cmd(etcd.Endpoint(0), "job", w, {"--event-log", dir_ / "events.b"},
                                "last_call_timeout=0.5", "etcd-v3"));
  auto ra = a.Wait(60s), rb = b.Wait(60s);
  ASSERT_EQ(ra.exit_code, 0) << ra.err;
  ASSERT_EQ(rb.exit_code, 0) << rb.err;
  std::string port;
  for (int rank = 0; rank < 4; ++rank) {
    auto env = ParseEnvFile(dir_ / ("env." + std::to_string(rank)));
    EXPECT_EQ(env["WORLD_SIZE"], "4");
    EXPECT_EQ(env["GROUP_WORLD_SIZE"], "2");
    EXPECT_EQ(env["LOCAL_RANK"], std::to_string(rank % 2));
    if (rank == 0) port = env["MASTER_PORT"];
    EXPECT_EQ(env["MASTER_PORT"], port) << "one MASTER_PORT per round";
  }
  EXPECT_NE(ra.err.find("rendezvous in etcd endpoints=" + etcd.Endpoint(0)), std::string::npos)
      << ra.err;
  // The agent that led wrote the state machine's records to its event log.
  const bool a_led = ra.err.find("leading the rendezvous in etcd") != std::string::npos;
  const std::string events = ReadFile(dir_ / (a_led ? "events.a" : "events.b"));
  for (const char* want : {"node_joined", "round_formed", "job_finished"}) {
    EXPECT_NE(events.find(want), std::string::npos) << want << " in " << events;
  }
  // Every key was bound to an agent's lease, revoked at exit.
  EXPECT_TRUE(WaitFor([&] { return etcd.CountKeys(kPrefix) == 0; }, 10s))
      << *etcd.CountKeys(kPrefix);
}

TEST_F(EtcdRendezvous, WorkerFailureRestartsBothNodesOnce) {
  EtcdCluster etcd(1);
  std::vector<std::string> w = {
      "record", dir_ / "records", "if-attempt", "0",     "if-rank", "3", "exit",
      "3",      "if-attempt",     "0",          "sleep", "30"};
  ChildRun a(FtrunBinary(), Cmd(etcd.Endpoint(0), "job", w, {"--max-restarts", "2"}));
  ChildRun b(FtrunBinary(), Cmd(etcd.Endpoint(0), "job", w, {"--max-restarts", "2"}));
  auto ra = a.Wait(60s), rb = b.Wait(60s);
  EXPECT_EQ(ra.exit_code, 0) << ra.err;
  EXPECT_EQ(rb.exit_code, 0) << rb.err;
  EXPECT_EQ(Count("attempt=1"), 4) << ReadFile(dir_ / "records");
  EXPECT_EQ(Count("attempt=2"), 0);
  for (const auto* err : {&ra.err, &rb.err}) {
    EXPECT_NE(err->find("Worker group FAILED. 2/2 attempts left"), std::string::npos) << *err;
  }
}

// dlrover-run's pre-flight network check runs through etcd like the rest of the state
// machine: orders in the views, results as reports.
TEST_F(EtcdRendezvous, TheNetworkCheckRunsThroughEtcd) {
  EtcdCluster etcd(1);
  std::vector<std::string> w = {"record", dir_ / "records"};
  std::vector<std::string> extra = {"--network-check", "--local-addr", "127.0.0.1"};
  ChildRun a(FtrunBinary(), Cmd(etcd.Endpoint(0), "job", w, extra));
  ChildRun b(FtrunBinary(), Cmd(etcd.Endpoint(0), "job", w, extra));
  auto ra = a.Wait(60s), rb = b.Wait(60s);
  for (const auto* r : {&ra, &rb}) {
    EXPECT_EQ(r->exit_code, 0) << r->err;
    EXPECT_NE(r->err.find("network check 1 results:"), std::string::npos) << r->err;
  }
  EXPECT_EQ(Count("world=4"), 4);
}

TEST_F(EtcdRendezvous, ANodeWithOtherNnodesIsRefused) {
  EtcdCluster etcd(1);
  std::vector<std::string> w = {"sleep", "30"};
  ChildRun a(FtrunBinary(), Cmd(etcd.Endpoint(0), "job", w));
  ASSERT_TRUE(WaitFor([&] { return a.Err().find("joined the job") != std::string::npos; }, 20s));
  // The first agent leads (it found no leader); a second one asking for 3 nodes is refused.
  auto args = Cmd(etcd.Endpoint(0), "job", w);
  *(std::find(args.begin(), args.end(), "--nnodes") + 1) = "3";
  auto r = RunFtrun(args, {}, 30s);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("--nnodes 3:3 on"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("differs from the job's 2:2"), std::string::npos) << r.err;
}

// A 3-member cluster loses one member that is not the one the agents talk to, then (another
// job) the one they talk to: the jobs go on without spending a restart.
TEST_F(EtcdRendezvous, ClusterMemberKilledMidJobCostsNothing) {
  EtcdCluster etcd(3);
  for (int victim : {2, 0}) {
    SCOPED_TRACE("killed member " + std::to_string(victim));
    const std::string name = "records" + std::to_string(victim);
    const std::string run = "job" + std::to_string(victim);
    std::vector<std::string> w = {"record", dir_ / name, "sleep", "6"};
    ChildRun a(FtrunBinary(), Cmd(etcd.Endpoints(), run, w));
    ChildRun b(FtrunBinary(), Cmd(etcd.Endpoints(), run, w));
    ASSERT_TRUE(WaitStarted(4, 30s, name)) << a.Err() << b.Err();
    etcd.Kill(victim);
    auto ra = a.Wait(60s), rb = b.Wait(60s);
    EXPECT_EQ(ra.exit_code, 0) << ra.err;
    EXPECT_EQ(rb.exit_code, 0) << rb.err;
    EXPECT_EQ(Count("attempt=1", name), 0) << "no restart spent";
    etcd.Start(victim);
    ASSERT_TRUE(etcd.WaitServing(20s, victim)) << etcd.Log(victim);
  }
}

TEST_F(EtcdRendezvous, EtcdDownForLessThanTheLeaseTtlCostsNothing) {
  EtcdCluster etcd(1);
  std::vector<std::string> w = {"record", dir_ / "records", "sleep", "8"};
  const std::string conf = "last_call_timeout=0.5,lease_ttl=10";
  ChildRun a(FtrunBinary(), Cmd(etcd.Endpoint(0), "job", w, {}, conf));
  ChildRun b(FtrunBinary(), Cmd(etcd.Endpoint(0), "job", w, {}, conf));
  ASSERT_TRUE(WaitStarted(4, 30s)) << a.Err() << b.Err();
  etcd.Kill(0);
  std::this_thread::sleep_for(3s);  // the outage (not an assertion's wait)
  etcd.Start(0);
  auto ra = a.Wait(60s), rb = b.Wait(60s);
  EXPECT_EQ(ra.exit_code, 0) << ra.err;
  EXPECT_EQ(rb.exit_code, 0) << rb.err;
  EXPECT_EQ(Count("attempt=1"), 0) << "no restart spent";
}

TEST_F(EtcdRendezvous, EtcdDownForLongerThanTheLeaseTtlStopsTheJobClearly) {
  EtcdCluster etcd(1);
  std::vector<std::string> w = {"pidfile", dir_.path(), "record", dir_ / "records", "sleep", "120"};
  const std::string conf = "last_call_timeout=0.5,lease_ttl=2";
  ChildRun a(FtrunBinary(), Cmd(etcd.Endpoint(0), "job", w, {}, conf));
  ChildRun b(FtrunBinary(), Cmd(etcd.Endpoint(0), "job", w, {}, conf));
  ASSERT_TRUE(WaitStarted(4, 30s)) << a.Err() << b.Err();
  etcd.Kill(0);
  auto ra = a.Wait(30s), rb = b.Wait(30s);
  for (const auto* r : {&ra, &rb}) {
    EXPECT_FALSE(r->timed_out);
    EXPECT_EQ(r->exit_code, 1) << r->err;
    EXPECT_NE(r->err.find("lost contact with etcd at " + etcd.Endpoint(0)), std::string::npos)
        << r->err;
  }
  for (int rank = 0; rank < 4; ++rank) {
    pid_t pid = ReadPid(dir_ / (std::to_string(rank) + ".pid"));
    ASSERT_GT(pid, 0);
    EXPECT_TRUE(WaitFor([&] { return !ProcessAlive(pid); }, 5s)) << "worker " << rank;
  }
}

TEST_F(EtcdRendezvous, TwoRunIdsOnOneEtcdDoNotMeet) {
  EtcdCluster etcd(1);
  std::vector<std::unique_ptr<ChildRun>> runs;
  for (const std::string run : {"alpha", "beta"}) {
    std::vector<std::string> w = {"record", dir_ / ("records-" + run), "sleep", "1"};
    for (int i = 0; i < 2; ++i) {
      runs.push_back(std::make_unique<ChildRun>(FtrunBinary(), Cmd(etcd.Endpoint(0), run, w)));
    }
  }
  for (auto& r : runs) {
    auto res = r->Wait(60s);
    EXPECT_EQ(res.exit_code, 0) << res.err;
  }
  for (const std::string run : {"alpha", "beta"}) {
    EXPECT_EQ(Count("world=4 attempt=0", "records-" + run), 4)
        << ReadFile(dir_ / ("records-" + run));
  }
}

TEST_F(EtcdRendezvous, ACrashedJobsKeysGoWithItsLeases) {
  EtcdCluster etcd(1);
  std::vector<std::string> w = {"record", dir_ / "records", "sleep", "120"};
  const std::string conf = "last_call_timeout=0.5,lease_ttl=2";
  {
    ChildRun a(FtrunBinary(), Cmd(etcd.Endpoint(0), "job", w, {}, conf));
    ChildRun b(FtrunBinary(), Cmd(etcd.Endpoint(0), "job", w, {}, conf));
    ASSERT_TRUE(WaitStarted(4, 30s)) << a.Err() << b.Err();
    EXPECT_GT(etcd.CountKeys(kPrefix).value_or(0), 0);
    a.Signal(SIGKILL);
    b.Signal(SIGKILL);
  }  // their process groups (the workers) are killed too
  EXPECT_TRUE(WaitFor([&] { return etcd.CountKeys(kPrefix) == 0; }, 15s))
      << "keys left: " << etcd.CountKeys(kPrefix).value_or(-1);
  // The same run id starts afresh.
  std::vector<std::string> w2 = {"record", dir_ / "records2"};
  ChildRun a(FtrunBinary(), Cmd(etcd.Endpoint(0), "job", w2, {}, conf));
  ChildRun b(FtrunBinary(), Cmd(etcd.Endpoint(0), "job", w2, {}, conf));
  auto ra = a.Wait(60s), rb = b.Wait(60s);
  EXPECT_EQ(ra.exit_code, 0) << ra.err;
  EXPECT_EQ(rb.exit_code, 0) << rb.err;
  EXPECT_EQ(Count("world=4", "records2"), 4);
}

// The agent holding the leader key is lost (SIGKILL, with its workers) or stops (SIGTERM):
// its key goes with its lease, another agent takes it and carries the job on with the two
// left, no restart spent.
TEST_F(EtcdRendezvous, LosingTheLeadingAgentReformsWithoutARestart) {
  EtcdCluster etcd(1);
  for (int sig : {SIGKILL, SIGTERM}) {
    SCOPED_TRACE(sig == SIGKILL ? "SIGKILL" : "SIGTERM");
    const std::string name = "records" + std::to_string(sig);
    std::vector<std::string> w = {"record", dir_ / name, "sleep", "4"};
    std::vector<std::unique_ptr<ChildRun>> agents;
    for (int i = 0; i < 3; ++i) {
      auto args = Cmd(etcd.Endpoint(0), "job" + std::to_string(sig), w);
      *(std::find(args.begin(), args.end(), "--nnodes") + 1) = "2:3";
      agents.push_back(std::make_unique<ChildRun>(FtrunBinary(), args));
    }
    ASSERT_TRUE(WaitFor([&] { return Count("world=6", name) >= 6; }, 30s));
    int leader = -1;
    for (int i = 0; i < 3; ++i) {
      if (agents[i]->Err().find("leading the rendezvous in etcd") != std::string::npos) leader = i;
    }
    ASSERT_GE(leader, 0);
    if (sig == SIGKILL) {
      ::kill(-agents[leader]->pid(), SIGKILL);  // the agent and its workers (its process group)
    } else {
      agents[leader]->Signal(SIGTERM);
    }
    for (int i = 0; i < 3; ++i) {
      if (i == leader) continue;
      auto r = agents[i]->Wait(60s);
      EXPECT_EQ(r.exit_code, 0) << r.err;
      EXPECT_NE(r.err.find("the rendezvous leader in etcd is gone"), std::string::npos) << r.err;
    }
    EXPECT_EQ(Count("world=4 attempt=0", name), 4) << ReadFile(dir_ / name);
    EXPECT_EQ(Count("attempt=1", name), 0) << "no restart spent";
  }
}

// A spare waits while the round is full and fills the gap when a node is lost; the survivor
// keeps its group rank (stable ranks) and no restart is spent. b joins first (group rank 0,
// and it leads the rendezvous): the agent that takes over from it keeps a's group rank 1 from
// a's key (before, it ordered the nodes afresh and a became 0).
TEST_F(EtcdRendezvous, ASpareFillsTheGapAndTheSurvivorKeepsItsRank) {
  EtcdCluster etcd(1);
  auto w = [&](const std::string& name) {
    return std::vector<std::string>{"record", dir_ / name, "wait-file", dir_ / "done"};
  };
  const std::string conf = "last_call_timeout=0.5,lease_ttl=2";
  ChildRun b(FtrunBinary(), Cmd(etcd.Endpoint(0), "job", w("records"), {}, conf));
  ASSERT_TRUE(
      WaitFor([&] { return b.Err().find("leading the rendezvous") != std::string::npos; }, 30s))
      << b.Err();
  ChildRun a(FtrunBinary(), Cmd(etcd.Endpoint(0), "job", w("records-a"), {}, conf));
  ASSERT_TRUE(WaitFor([&] { return Count("attempt=0", "records-a") == 2; }, 30s)) << a.Err();
  ASSERT_TRUE(WaitStarted(2, 30s)) << b.Err();
  ChildRun spare(FtrunBinary(),
                 Cmd(etcd.Endpoint(0), "job", w("records"), {"--role", "spare"}, conf));
  ASSERT_TRUE(
      WaitFor([&] { return spare.Err().find("joined the job") != std::string::npos; }, 20s));
  EXPECT_EQ(Count("role=spare"), 0) << "a spare does not disturb a full round";
  ::kill(-b.pid(), SIGKILL);  // b and its workers: a lost node
  b.Wait(10s);
  ASSERT_TRUE(WaitFor([&] { return Count("role=spare") == 2; }, 30s)) << a.Err() << spare.Err();
  ASSERT_TRUE(WaitFor([&] { return Count("attempt=0", "records-a") == 4; }, 20s)) << a.Err();
  EXPECT_EQ(Count("attempt=1") + Count("attempt=1", "records-a"), 0) << "no restart spent";
  // The survivor's workers, in both rounds: the same group rank.
  EXPECT_EQ(Count(" group=1 ", "records-a"), 4) << ReadFile(dir_ / "records-a");
  { std::ofstream(dir_ / "done") << ""; }
  EXPECT_EQ(a.Wait(30s).exit_code, 0);
  EXPECT_EQ(spare.Wait(30s).exit_code, 0);
}

// A round that cannot form ends the job after torch's deadline for the backend's name:
// `timeout` with etcd, join_timeout with etcd-v2 (the other key does not shorten it).
TEST_F(EtcdRendezvous, BelowMinTheJobEndsAfterTorchsRoundDeadline) {
  EtcdCluster etcd(1);
  for (const std::string backend : {"etcd", "etcd-v2"}) {
    SCOPED_TRACE(backend);
    const std::string key = backend == "etcd" ? "timeout" : "join_timeout";
    const std::string other = backend == "etcd" ? "join_timeout" : "timeout";
    const std::string conf = "last_call_timeout=0.5,lease_ttl=2," + key + "=4," + other + "=1000";
    std::vector<std::string> w = {"sleep", "60"};
    ChildRun a(FtrunBinary(), Cmd(etcd.Endpoint(0), "j" + backend, w, {}, conf, backend));
    auto r = a.Wait(30s);
    EXPECT_FALSE(r.timed_out);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    // The error names the key that set the deadline.
    EXPECT_NE(r.err.find("did not complete within " + key + "=4s: 1 node(s) joined, --nnodes is 2"),
              std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("rdzv_backend=" + backend + " "), std::string::npos) << r.err;
  }
}

// etcd's authentication on: agents log in with a user and a password file; a wrong password
// is a clear, immediate error.
TEST_F(EtcdRendezvous, AgentsAuthenticateToEtcd) {
  EtcdCluster etcd(1);
  ASSERT_TRUE(etcd.EnableAuth("s3cret"));
  { std::ofstream(dir_ / "pw") << "s3cret\n"; }
  std::vector<std::string> w = {"record", dir_ / "records"};
  const std::map<std::string, std::string> env = {{"FTRUN_ETCD_USER", "root"},
                                                  {"FTRUN_ETCD_PASSWORD_FILE", dir_ / "pw"}};
  ChildRun a(FtrunBinary(), Cmd(etcd.Endpoint(0), "job", w), env);
  ChildRun b(FtrunBinary(), Cmd(etcd.Endpoint(0), "job", w), env);
  auto ra = a.Wait(60s), rb = b.Wait(60s);
  EXPECT_EQ(ra.exit_code, 0) << ra.err;
  EXPECT_EQ(rb.exit_code, 0) << rb.err;
  EXPECT_EQ(Count("world=4"), 4);

  auto r = RunFtrun(Cmd(etcd.Endpoint(0), "job2", w, {}, "last_call_timeout=0.5,user=root"),
                    {{"FTRUN_ETCD_PASSWORD", "wrong"}}, 30s);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("refused this agent: etcd authentication as user 'root'"), std::string::npos)
      << r.err;
}

// protocol=https with torchrun's cacert, cert and key: etcd requires client certificates; an
// agent without one cannot join.
TEST_F(EtcdRendezvous, AgentsSpeakTlsToEtcd) {
  if (std::system("openssl version >/dev/null 2>&1") != 0) GTEST_SKIP() << "no openssl CLI";
  const auto cluster = TlsEtcd();
  const EtcdCluster& etcd = *cluster;
  const EtcdTlsFiles client = ClientTls();
  const std::string tls = "last_call_timeout=0.5,protocol=https,cacert=" + dir_ / "ca.pem";
  std::vector<std::string> w = {"record", dir_ / "records"};
  const std::string conf = tls + ",cert=" + client.cert + ",key=" + client.key;
  ChildRun a(FtrunBinary(), Cmd(etcd.Endpoint(0), "job", w, {}, conf));
  ChildRun b(FtrunBinary(), Cmd(etcd.Endpoint(0), "job", w, {}, conf));
  auto ra = a.Wait(60s), rb = b.Wait(60s);
  EXPECT_EQ(ra.exit_code, 0) << ra.err;
  EXPECT_EQ(rb.exit_code, 0) << rb.err;
  EXPECT_EQ(Count("world=4"), 4);
  // Without a client certificate etcd does not let the agent in.
  auto r = RunFtrun(Cmd(etcd.Endpoint(0), "job2", w, {}, tls + ",timeout=2"), {}, 30s);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("cannot reach etcd at " + etcd.Endpoint(0) + " within timeout=2s"),
            std::string::npos)
      << r.err;
}

// torch's etcd-v2 spells the TLS keys ca_cert, ssl_cert, ssl_cert_key (and takes HTTPS in any
// case); torch's etcd takes a cert file that holds its key too. Both lines join one job.
TEST_F(EtcdRendezvous, TorchsOtherTlsSpellingsWork) {
  if (std::system("openssl version >/dev/null 2>&1") != 0) GTEST_SKIP() << "no openssl CLI";
  const auto cluster = TlsEtcd();
  const EtcdCluster& etcd = *cluster;
  const EtcdTlsFiles client = ClientTls();
  { std::ofstream(dir_ / "both.pem") << ReadFile(client.cert) << ReadFile(client.key); }
  std::vector<std::string> w = {"record", dir_ / "records"};
  const std::string v2 = "last_call_timeout=0.5,protocol=HTTPS,ca_cert=" + dir_ / "ca.pem" +
                         ",ssl_cert=" + client.cert + ",ssl_cert_key=" + client.key;
  const std::string v1 = "last_call_timeout=0.5,protocol=https,cacert=" + dir_ / "ca.pem" +
                         ",cert=" + dir_ / "both.pem";
  ChildRun a(FtrunBinary(), Cmd(etcd.Endpoint(0), "job", w, {}, v2, "etcd-v2"));
  ChildRun b(FtrunBinary(), Cmd(etcd.Endpoint(0), "job", w, {}, v1, "etcd"));
  auto ra = a.Wait(60s), rb = b.Wait(60s);
  EXPECT_EQ(ra.exit_code, 0) << ra.err;
  EXPECT_EQ(rb.exit_code, 0) << rb.err;
  EXPECT_EQ(Count("world=4"), 4);
}

TEST_F(EtcdRendezvous, BadSettingsAreUsageErrors) {
  auto r = RunFtrun(Cmd("127.0.0.1:1", "job", {"exit", "0"}, {}, "protocol=ftp"), {}, 30s);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("protocol must be http or https, got 'ftp'"), std::string::npos) << r.err;
  r = RunFtrun(Cmd("127.0.0.1:1", "job", {"exit", "0"}, {}, "lease_ttl=1"), {}, 30s);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("lease_ttl needs whole seconds from 2 to 3600, got '1'"), std::string::npos)
      << r.err;
  r = RunFtrun(Cmd("127.0.0.1:1,,127.0.0.1:2", "job", {"exit", "0"}), {}, 30s);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("'127.0.0.1:1,,127.0.0.1:2' has an empty etcd member"), std::string::npos)
      << r.err;
  r = RunFtrun(Cmd("127.0.0.1:1", "job", {"exit", "0"}, {}, "protocol=https,cert=" + dir_ / "no"),
               {}, 30s);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("cannot read '" + dir_ / "no" + "'"), std::string::npos) << r.err;
}

TEST_F(EtcdRendezvous, UnreachableEtcdEndsTheJobAfterTimeout) {
  const std::string port = std::to_string(TestPort());
  auto r = RunFtrun(Cmd("127.0.0.1:" + port, "job", {"exit", "0"}, {}, "timeout=1.5"), {}, 30s);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("cannot reach etcd at 127.0.0.1:" + port + " within timeout=1.5s"),
            std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace ftrun::testing
