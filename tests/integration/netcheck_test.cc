// The pre-flight checks with real agents on loopback: --network-check (pairwise probes, check
// commands, exclusion and re-formation, `ftrun master --network-check`, a node joining a
// checked job) and --switchbox-check with fake probes (tests/support/netcheck/).
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "launcher/host.h"
#include "tests/support/test_support.h"

namespace ftrun::testing {
namespace {

namespace pb = google::protobuf;
using namespace std::chrono_literals;

// The check command of the exclusion tests: it fails on the agent started with FAIL_CHECK=1.
constexpr const char* kFailWhereAsked = "test -z \"$FAIL_CHECK\"";

std::string Str(const pb::Struct& s, const std::string& key) {
  auto it = s.fields().find(key);
  return it == s.fields().end() ? "<unset>" : it->second.string_value();
}

const pb::ListValue& List(const pb::Struct& s, const std::string& key) {
  static const pb::ListValue kEmpty;
  auto it = s.fields().find(key);
  return it == s.fields().end() ? kEmpty : it->second.list_value();
}

int CountLines(const std::string& text, const std::string& needle) {
  int n = 0;
  for (const auto& l : Lines(text)) n += l.find(needle) != std::string::npos;
  return n;
}

// Table lines of the network check that give a node `verdict` ("  <node>  <mbps> MB/s  healthy").
int VerdictLines(const std::string& log, const std::string& verdict) {
  const std::regex line(" MB/s  " + verdict + "( \\(.*\\))?$");
  int n = 0;
  for (const auto& l : Lines(log)) n += std::regex_search(l, line);
  return n;
}

// The node id an agent logs when it joins ("joined the job at ... node_id=<id> ...").
std::string NodeId(const std::string& log) {
  std::smatch m;
  static const std::regex id("joined the job at \\S+ node_id=(\\S+)");
  return std::regex_search(log, m, id) ? m[1].str() : "";
}

// A node id is "<host>:<pid>:<random>".
std::string HostOf(const std::string& node_id) { return node_id.substr(0, node_id.find(':')); }

class NetCheck : public ::testing::Test {
 protected:
  void SetUp() override { port_ = std::to_string(launcher::PickFreePort().value()); }

  // ftrun <dynamic rendezvous on 127.0.0.1:port_> <options> --no-python fake_worker <actions>
  // (1 MiB each way per pair unless `bytes` says otherwise.)
  std::vector<std::string> Cmd(const std::string& nnodes, std::vector<std::string> options,
                               const std::vector<std::string>& actions,
                               const std::string& conf = kFastConf,
                               const std::string& bytes = "1MiB") {
    std::vector<std::string> argv = {
        "--log-dir", dir_ / "logs", "--nproc-per-node", "2", "--event-log", dir_ / "events",
        "--nnodes", nnodes, "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:" + port_,
        "--rdzv-id", "job", "--rdzv-conf", conf, "--network-check-bytes", bytes};
    argv.insert(argv.end(), options.begin(), options.end());
    argv.push_back("--no-python");
    argv.push_back(FakeWorkerBinary());
    argv.insert(argv.end(), actions.begin(), actions.end());
    return argv;
  }
  std::vector<std::string> Record() { return {"record", dir_ / "records"}; }

  // Starts agents one after the other, each once the previous one has joined, so the first
  // hosts the rendezvous and the group ranks (and so the check's pairs) follow the order:
  // round 0 pairs 0-1 and 2-3.
  std::vector<std::unique_ptr<ChildRun>> StartInOrder(
      const std::vector<std::vector<std::string>>& argvs,
      const std::map<int, std::map<std::string, std::string>>& env = {}) {
    std::vector<std::unique_ptr<ChildRun>> agents;
    for (size_t i = 0; i < argvs.size(); ++i) {
      auto e = env.count(static_cast<int>(i)) ? env.at(static_cast<int>(i))
                                              : std::map<std::string, std::string>{};
      agents.push_back(std::make_unique<ChildRun>(FtrunBinary(), argvs[i], e));
      ChildRun& a = *agents.back();
      EXPECT_TRUE(WaitFor([&] { return a.Err().find("joined the job") != std::string::npos; },
                          20s))
          << "agent " << i << ":\n"
          << a.Err();
    }
    return agents;
  }

  int Count(const std::string& needle) {
    return CountLines(ReadFile(dir_ / "records"), needle);
  }
  // The event log's records of one kind.
  std::vector<pb::Struct> Events(const std::string& event) {
    std::vector<pb::Struct> out;
    for (const auto& line : Lines(ReadFile(dir_ / "events"))) {
      pb::Struct s;
      if (!pb::util::JsonStringToMessage(line, &s).ok()) {
        ADD_FAILURE() << "not JSON: " << line;
        continue;
      }
      if (Str(s, "event") == event) out.push_back(s);
    }
    return out;
  }
  // The verdict the network_check record `check` gives `node`.
  static std::string Verdict(const pb::Struct& check, const std::string& node) {
    for (const auto& n : List(check, "nodes").values()) {
      if (Str(n.struct_value(), "node") == node) return Str(n.struct_value(), "verdict");
    }
    return "<absent>";
  }
  // The node `node` was paired with in round 0.
  static std::string Round0Partner(const pb::Struct& check, const std::string& node) {
    for (const auto& p : List(check, "pairs").values()) {
      const pb::Struct& s = p.struct_value();
      if (s.fields().at("round").number_value() != 0) continue;
      if (Str(s, "a") == node) return Str(s, "b");
      if (Str(s, "b") == node) return Str(s, "a");
    }
    return "<none>";
  }

  std::string Probe(const std::string& behaviours) {
    return "/bin/sh " + SourceDir() + "/tests/support/netcheck/fake_switchbox_probe.sh " +
           behaviours;
  }
  // A single-node job with the switchbox check.
  std::vector<std::string> Switchbox(std::vector<std::string> options) {
    std::vector<std::string> argv = {"--log-dir", dir_ / "logs", "--nproc-per-node", "2",
                                     "--event-log", dir_ / "events", "--switchbox-check"};
    argv.insert(argv.end(), options.begin(), options.end());
    argv.insert(argv.end(), {"--no-python", FakeWorkerBinary(), "record", dir_ / "records"});
    return argv;
  }

  static constexpr const char* kFastConf =
      "last_call_timeout=0.5,keep_alive_interval=0.5,keep_alive_max_attempt=4";
  // With --nnodes 3:4: time for the fourth agent to join before a round of three forms.
  static constexpr const char* kWaitForFour =
      "last_call_timeout=5,keep_alive_interval=0.5,keep_alive_max_attempt=4";
  TempDir dir_;
  std::string port_;
};

TEST_F(NetCheck, FourHealthyAgentsAreCheckedAndAllRun) {
  // The default 64 MiB, as the verdicts are asserted: with 1 MiB (a few ms per transfer on
  // loopback) one stall of tens of ms in a transfer makes a healthy node read as a straggler.
  std::vector<std::vector<std::string>> argvs(
      4, Cmd("4", {"--network-check"}, Record(), kFastConf, "64MiB"));
  auto agents = StartInOrder(argvs);
  std::vector<RunResult> r;
  for (auto& a : agents) r.push_back(a->Wait(60s));
  std::vector<std::string> ids;
  for (size_t i = 0; i < r.size(); ++i) {
    ASSERT_EQ(r[i].exit_code, 0) << "agent " << i << ":\n" << r[i].err;
    ids.push_back(NodeId(r[i].err));
  }
  EXPECT_EQ(Count("world=8"), 8) << ReadFile(dir_ / "records");
  EXPECT_EQ(Lines(ReadFile(dir_ / "records")).size(), 8u);
  // The table: in the hosting agent's log (from its rendezvous server) and in the others'.
  EXPECT_NE(r[0].err.find("rendezvous server listening"), std::string::npos);
  EXPECT_NE(r[0].err.find("network check finished round=0: all nodes passed"), std::string::npos)
      << r[0].err;
  EXPECT_EQ(VerdictLines(r[0].err, "healthy"), 4) << r[0].err;
  EXPECT_NE(r[1].err.find("network check 1 results:"), std::string::npos) << r[1].err;
  EXPECT_EQ(VerdictLines(r[1].err, "healthy"), 4) << r[1].err;
  // One network_check record per writer: the server (in the host's log) and each other agent.
  std::map<std::string, int> writers;
  for (const auto& e : Events("network_check")) {
    ++writers[Str(e, "node")];
    EXPECT_EQ(List(e, "nodes").values_size(), 4);
    EXPECT_TRUE(e.fields().at("isolated").bool_value());
    EXPECT_EQ(List(e, "faulty").values_size(), 0);
  }
  EXPECT_EQ(writers.size(), 4u);
  for (const auto& id : ids) EXPECT_EQ(writers[id], 1) << id;
  EXPECT_EQ(Events("network_check_started").size(), 1u);
}

TEST_F(NetCheck, CheckCommandFailingOnOneAgentExcludesItAndNotItsPartner) {
  std::vector<std::vector<std::string>> argvs(
      4, Cmd("3:4", {"--network-check-cmd", kFailWhereAsked}, Record(), kWaitForFour));
  auto agents = StartInOrder(argvs, {{2, {{"FAIL_CHECK", "1"}}}});
  std::vector<RunResult> r;
  for (auto& a : agents) r.push_back(a->Wait(60s));
  const std::string bad = NodeId(r[2].err);
  ASSERT_FALSE(bad.empty()) << r[2].err;
  EXPECT_EQ(r[2].exit_code, 75) << r[2].err;
  EXPECT_EQ(CountLines(r[2].err, "this node leaves the job: the network check found it faulty"),
            1)
      << r[2].err;
  EXPECT_EQ(CountLines(r[2].err, "[error]"), 1) << "one line says why:\n" << r[2].err;
  EXPECT_NE(r[2].err.find("check command on " + HostOf(bad) + ": exit code 1"),
            std::string::npos)
      << r[2].err;
  EXPECT_EQ(r[2].err.find("worker local_rank=0 started"), std::string::npos) << r[2].err;
  for (int i : {0, 1, 3}) EXPECT_EQ(r[i].exit_code, 0) << "agent " << i << ":\n" << r[i].err;
  // The three others re-formed at once and ran; no worker ever saw the round of four.
  EXPECT_EQ(Count("world=6"), 6) << ReadFile(dir_ / "records");
  EXPECT_EQ(Lines(ReadFile(dir_ / "records")).size(), 6u);
  EXPECT_EQ(Count("attempt=0"), 6) << "the exclusion spent no restart";
  // Round 0 paired it with agent 3, which passed round 1 and is not blamed.
  auto checks = Events("network_check");
  ASSERT_FALSE(checks.empty());
  const pb::Struct& check = checks.front();
  EXPECT_EQ(Round0Partner(check, bad), NodeId(r[3].err));
  EXPECT_EQ(Verdict(check, bad), "faulty");
  EXPECT_NE(Verdict(check, NodeId(r[3].err)), "faulty");  // (a straggler is only reported)
  int excluded = 0;
  for (const auto& e : Events("node_excluded")) excluded += Str(e, "member") == bad;
  EXPECT_EQ(excluded, 1) << "the server's record names it";
}

TEST_F(NetCheck, TooFewLeftAfterTheExclusionFailsTheJobNamingTheNode) {
  std::vector<std::vector<std::string>> argvs(
      4, Cmd("4", {"--network-check-cmd", kFailWhereAsked}, Record()));
  auto agents = StartInOrder(argvs, {{2, {{"FAIL_CHECK", "1"}}}});
  std::vector<RunResult> r;
  for (auto& a : agents) r.push_back(a->Wait(60s));
  const std::string bad = NodeId(r[2].err);
  EXPECT_EQ(r[2].exit_code, 75) << r[2].err;
  const std::string why = "the network check excluded " + HostOf(bad) +
                          "; 3 node(s) left, --nnodes needs at least 4";
  for (int i : {0, 1, 3}) {
    EXPECT_EQ(r[i].exit_code, 1) << "agent " << i << ":\n" << r[i].err;
    EXPECT_NE(r[i].err.find("job finished outcome=failed exit_code=1 reason=\"" + why),
              std::string::npos)
        << "agent " << i << ":\n"
        << r[i].err;
  }
  EXPECT_FALSE(FileExists(dir_ / "records")) << "no worker started";
  int excluded = 0;
  for (const auto& e : Events("node_excluded")) excluded += Str(e, "member") == bad;
  EXPECT_EQ(excluded, 1);
}

TEST_F(NetCheck, TwoAgentsWithABrokenCheckCannotIsolateTheFault) {
  auto argv = Cmd("2", {"--network-check-cmd", kFailWhereAsked}, Record());
  auto agents = StartInOrder({argv, argv}, {{1, {{"FAIL_CHECK", "1"}}}});
  for (auto& a : agents) {
    auto r = a->Wait(60s);
    EXPECT_EQ(r.exit_code, 1) << "the job fails; no host is blamed:\n" << r.err;
    EXPECT_NE(r.err.find("the network check could not isolate the fault (no healthy node to "
                         "compare with)"),
              std::string::npos)
        << r.err;
    EXPECT_EQ(r.err.find("this node leaves the job"), std::string::npos) << r.err;
  }
  EXPECT_FALSE(FileExists(dir_ / "records"));
}

TEST_F(NetCheck, SingleNodeJobSkipsTheCheck) {
  auto r = RunFtrun({"--log-dir", dir_ / "logs", "--nproc-per-node", "2", "--network-check",
                     "--no-python", FakeWorkerBinary(), "record", dir_ / "records"},
                    {}, 30s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("network check: a single-node job has no pair to test; skipped"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(Count("world=2"), 2);
}

TEST_F(NetCheck, StandaloneMasterRunsTheCheck) {
  ChildRun master(FtrunBinary(), {"master", "--port", port_, "--nnodes", "2", "--rdzv-id", "job",
                                  "--network-check", "--network-check-bytes", "1MiB"});
  ASSERT_TRUE(WaitFor([&] { return master.Err().find("listening") != std::string::npos; }, 20s))
      << master.Err();
  ChildRun a(FtrunBinary(), Cmd("2", {"--network-check"}, Record()));
  ChildRun b(FtrunBinary(), Cmd("2", {"--network-check"}, Record()));
  auto ra = a.Wait(60s), rb = b.Wait(60s), rm = master.Wait(60s);
  EXPECT_EQ(ra.exit_code, 0) << ra.err;
  EXPECT_EQ(rb.exit_code, 0) << rb.err;
  EXPECT_EQ(rm.exit_code, 0) << rm.err;
  EXPECT_EQ(Count("world=4"), 4) << ReadFile(dir_ / "records");
  EXPECT_NE(rm.err.find("network check finished round=0: all nodes passed"), std::string::npos)
      << rm.err;
  EXPECT_EQ(VerdictLines(rm.err, "healthy"), 2) << rm.err;
  for (const auto* r : {&ra, &rb}) EXPECT_EQ(VerdictLines(r->err, "healthy"), 2) << r->err;
}

TEST_F(NetCheck, MasterWithoutTheCheckRefusesAnAgentWithIt) {
  ChildRun master(FtrunBinary(), {"master", "--port", port_, "--nnodes", "2", "--rdzv-id", "job"});
  ASSERT_TRUE(WaitFor([&] { return master.Err().find("listening") != std::string::npos; }, 20s));
  auto r = RunFtrun(Cmd("2", {"--network-check"}, Record()), {}, 30s);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(CountLines(r.err, "[error]"), 1) << r.err;
  EXPECT_NE(r.err.find("asks for --network-check, but this rendezvous server runs without it"),
            std::string::npos)
      << r.err;
  master.Signal(SIGTERM);
  master.Wait(30s);
}

TEST_F(NetCheck, MasterWithTheCheckRefusesAnAgentWithoutIt) {
  ChildRun master(FtrunBinary(), {"master", "--port", port_, "--nnodes", "2", "--rdzv-id", "job",
                                  "--network-check"});
  ASSERT_TRUE(WaitFor([&] { return master.Err().find("listening") != std::string::npos; }, 20s));
  auto r = RunFtrun(Cmd("2", {}, Record()), {}, 30s);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(CountLines(r.err, "[error]"), 1) << r.err;
  EXPECT_NE(r.err.find("has no network-check probe; start every agent with --network-check"),
            std::string::npos)
      << r.err;
  master.Signal(SIGTERM);
  auto rm = master.Wait(30s);
  EXPECT_NE(rm.err.find("rejected join"), std::string::npos) << rm.err;
}

TEST_F(NetCheck, AJoiningAgentBringsANewCheckAndTheJobGoesOn) {
  auto w = Record();
  w.insert(w.end(), {"wait-file", dir_ / "done"});
  auto argv = Cmd("2:3", {"--network-check"}, w);
  auto agents = StartInOrder({argv, argv});
  ASSERT_TRUE(WaitFor([&] { return Count("world=4") == 4; }, 30s))
      << agents[0]->Err() << agents[1]->Err();
  ChildRun c(FtrunBinary(), argv);
  ASSERT_TRUE(WaitFor([&] { return Count("world=6") == 6; }, 30s))
      << agents[0]->Err() << c.Err();
  std::ofstream(dir_ / "done") << "";
  auto r0 = agents[0]->Wait(30s), r1 = agents[1]->Wait(30s), rc = c.Wait(30s);
  EXPECT_EQ(r0.exit_code, 0) << r0.err;
  EXPECT_EQ(r1.exit_code, 0) << r1.err;
  EXPECT_EQ(rc.exit_code, 0) << rc.err;
  EXPECT_EQ(Count("attempt=0"), 10) << "the new member spent no restart";
  // The server (hosted by the first agent) checked twice: two nodes, then three.
  const std::string host = NodeId(r0.err);
  std::vector<pb::Struct> by_server;
  for (const auto& e : Events("network_check")) {
    if (Str(e, "node") == host) by_server.push_back(e);
  }
  ASSERT_EQ(by_server.size(), 2u) << ReadFile(dir_ / "events");
  EXPECT_EQ(List(by_server[0], "nodes").values_size(), 2);
  EXPECT_EQ(List(by_server[1], "nodes").values_size(), 3);
  EXPECT_NE(Verdict(by_server[1], NodeId(rc.err)), "faulty");
  EXPECT_NE(Verdict(by_server[1], NodeId(rc.err)), "<absent>");
  EXPECT_NE(rc.err.find("network check 2 results:"), std::string::npos) << rc.err;
}

TEST_F(NetCheck, SwitchboxAllPairsPassAndTheJobRuns) {
  auto r = RunFtrun(Switchbox({"--box-pairs", "0:1", "2:4", "--min-bandwidth", "10000",
                               "--min-channels", "2", "--switchbox-probe",
                               Probe("0:1=12345.6 2:4=15000")}),
                    {}, 30s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("switchbox pair 0:1: 12345.6 MB/s"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("switchbox pair 2:4: 15000.0 MB/s"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("switchbox check passed"), std::string::npos) << r.err;
  EXPECT_EQ(Count("world=2"), 2);
  auto records = Events("switchbox_check");
  ASSERT_EQ(records.size(), 1u);
  EXPECT_TRUE(records[0].fields().at("ok").bool_value());
  EXPECT_EQ(records[0].fields().at("passed").number_value(), 2);
}

TEST_F(NetCheck, SwitchboxTooFewPassingPairsLeaveBeforeJoining) {
  ChildRun master(FtrunBinary(), {"master", "--port", port_, "--nnodes", "2", "--rdzv-id", "job"});
  ASSERT_TRUE(WaitFor([&] { return master.Err().find("listening") != std::string::npos; }, 20s));
  auto argv = Cmd("2", {"--switchbox-check", "--box-pairs", "0:1 2:4 3:5 6:7", "--min-channels",
                        "2", "--switchbox-probe", Probe("0:1=12000 2:4=500 3:5=crash 6:7=error")},
                  Record());
  auto r = RunFtrun(argv, {}, 30s);
  EXPECT_EQ(r.exit_code, 75) << r.err;
  EXPECT_EQ(CountLines(r.err, "this node leaves the job: the switchbox check failed"), 1) << r.err;
  EXPECT_EQ(CountLines(r.err, "[error]"), 1) << r.err;
  EXPECT_NE(r.err.find("switchbox pair 2:4: 500.0 MB/s (too slow)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("switchbox pair 3:5: probe ended with exit code 3"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("switchbox pair 6:7: cannot enable peer access"), std::string::npos)
      << r.err;
  // Nothing started: the node never joined and ran no worker.
  EXPECT_EQ(r.err.find("joined the job"), std::string::npos) << r.err;
  EXPECT_FALSE(FileExists(dir_ / "records"));
  master.Signal(SIGTERM);
  auto rm = master.Wait(30s);
  EXPECT_EQ(rm.err.find("node_joined"), std::string::npos) << rm.err;
}

TEST_F(NetCheck, SwitchboxGarbageAndAHungProbeFailTheirPairsWithReasons) {
  const std::string pids = dir_ / "hung.pids";
  auto start = std::chrono::steady_clock::now();
  auto r = RunFtrun(Switchbox({"--box-pairs", "0:1 2:4 3:5", "--min-channels", "1",
                               "--switchbox-timeout", "1", "--switchbox-probe",
                               Probe("0:1=12000 2:4=garbage 3:5=hang")}),
                    {{"FAKE_PROBE_PIDS", pids}}, 30s);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(r.exit_code, 0) << "one passing pair is enough here:\n" << r.err;
  EXPECT_NE(r.err.find("switchbox pair 0:1: 12000.0 MB/s"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("switchbox pair 2:4: no result"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("p2pBandwidthLatencyTest v0.1"), std::string::npos)
      << "the garbage is quoted:\n"
      << r.err;
  EXPECT_NE(r.err.find("switchbox pair 3:5: timed out after 1 s"), std::string::npos) << r.err;
  EXPECT_LT(seconds, 20) << "the hung probe did not hold the job";
  EXPECT_EQ(Count("world=2"), 2);
  // The hung probe (and its child) are gone.
  std::istringstream in(ReadFile(pids));
  pid_t probe = 0, child = 0;
  ASSERT_TRUE(in >> probe >> child) << ReadFile(pids);
  EXPECT_TRUE(WaitFor([&] { return !ProcessAlive(probe) && !ProcessAlive(child); }, 10s))
      << probe << " " << child;
  auto records = Events("switchbox_check");
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].fields().at("passed").number_value(), 1);
  int failed = 0;
  for (const auto& p : List(records[0], "pairs").values()) {
    failed += !p.struct_value().fields().at("ok").bool_value();
  }
  EXPECT_EQ(failed, 2);
}

TEST_F(NetCheck, SwitchboxDefaultProbeWithoutAGpuIsOneLine) {
  if (std::filesystem::exists("/proc/driver/nvidia/gpus") &&
      !std::filesystem::is_empty("/proc/driver/nvidia/gpus")) {
    GTEST_SKIP() << "this machine has an NVIDIA GPU";
  }
  ChildRun run(FtrunBinary(), Switchbox({}), {}, {"CUDA_VISIBLE_DEVICES"});
  auto r = run.Wait(30s);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  ASSERT_EQ(Lines(r.err).size(), 1u) << r.err;
  EXPECT_NE(r.err.find("no GPU"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--switchbox-check"), std::string::npos) << r.err;
  EXPECT_FALSE(FileExists(dir_ / "records"));
}

TEST_F(NetCheck, MalformedBoxPairIsAUsageErrorNamingIt) {
  auto r = RunFtrun(Switchbox({"--box-pairs", "0:1", "2-4", "--switchbox-probe", Probe("")}), {},
                    30s);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--box-pairs: bad pair \"2-4\""), std::string::npos) << r.err;
  EXPECT_FALSE(FileExists(dir_ / "records"));
}

}  // namespace
}  // namespace ftrun::testing
