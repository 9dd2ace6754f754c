// The network check with real agents on loopback: probes, exclusion, `ftrun master`, joins.
#include <arpa/inet.h>
#include <google/protobuf/struct.pb.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <fstream>
#include <future>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "tests/integration/netcheck_fixture.h"

namespace ftrun::testing {
namespace {

namespace pb = google::protobuf;
using namespace std::chrono_literals;

// The check command of the exclusion tests: it fails on the agent started with FAIL_CHECK=1.
constexpr const char* kFailWhereAsked = "test -z \"$FAIL_CHECK\"";

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

// An outsider on 127.0.0.1:port: sends `bytes`, then returns everything the peer answers
// until it hangs up (or 20 s pass: "<no hang-up>").
std::string Outsider(int port, const std::string& bytes) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{20, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    ::close(fd);
    return "<connect failed>";
  }
  if (!bytes.empty() && ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) < 0) {
    ::close(fd);
    return "<send failed>";
  }
  std::string got;
  char buf[512];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EAGAIN) got = "<no hang-up>";
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return got;
}

// A probe message header (launcher/netcheck/pair_probe.h, version 2) and its payload.
std::string ProbeMessage(uint8_t type, const std::string& payload, uint64_t length) {
  std::string m = {'F', 'T', 'N', 'P', 2, static_cast<char>(type), 0, 0};
  for (int i = 0; i < 8; ++i) m.push_back(static_cast<char>(length >> (56 - 8 * i)));
  return m + payload;
}

// A node id is "<host>:<pid>:<random>".
std::string HostOf(const std::string& node_id) { return node_id.substr(0, node_id.find(':')); }

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

// The probe port answers the check's members only: an outsider without the check's key (none,
// one of the wrong length, a wrong one, or silence) is refused before anything it sends is
// read, with a fixed reason and a log line that quotes nothing of it; the check still measures
// both directions and the job runs.
TEST_F(NetCheck, AnOutsiderWithoutTheKeyIsRefusedAndTheCheckStillMeasures) {
  const int p0 = TestPort(), p1 = TestPort();
  // The workers wait for `go`: the agents (and their probe servers) outlive the outsiders.
  std::vector<std::string> work = Record();
  work.insert(work.end(), {"wait-file", dir_ / "go"});
  auto a0 = Cmd("2", {"--network-check", "--network-check-port", std::to_string(p0)}, work);
  auto a1 = Cmd("2", {"--network-check", "--network-check-port", std::to_string(p1)}, work);
  auto agents = StartInOrder({a0});
  // Before the check (no key yet) and across it (a held connection with a wrong key).
  const std::string ping = ProbeMessage(1, "12345678", 8);
  EXPECT_NE(Outsider(p0, "GET /evil-outsider HTTP/1.0\r\n\r\n").find("not an ftrun netcheck probe"),
            std::string::npos);
  EXPECT_NE(Outsider(p0, ping).find("no probe key first"), std::string::npos);
  EXPECT_NE(Outsider(p0, ProbeMessage(7, "evil-short", 10) + ping)
                .find("a probe key of the wrong length"),
            std::string::npos);
  auto wrong = std::async(std::launch::async, [&] {
    return Outsider(p0, ProbeMessage(7, std::string(32, 'e'), 32) + ProbeMessage(3, "", 1 << 20));
  });
  auto silent = std::async(std::launch::async, [&] { return Outsider(p0, ""); });
  agents.push_back(std::make_unique<ChildRun>(FtrunBinary(), a1));
  EXPECT_NE(wrong.get().find("a wrong probe key"), std::string::npos);
  EXPECT_EQ(silent.get(), "");  // closed unanswered at the handshake's deadline
  std::ofstream(dir_ / "go") << "";
  std::vector<RunResult> r;
  for (auto& a : agents) r.push_back(a->Wait(60s));
  for (size_t i = 0; i < r.size(); ++i)
    ASSERT_EQ(r[i].exit_code, 0) << "agent " << i << ":\n" << r[i].err;
  EXPECT_NE(r[0].err.find("network check finished round=0: all nodes passed"), std::string::npos)
      << r[0].err;
  auto checks = Events("network_check");
  ASSERT_FALSE(checks.empty());
  for (const auto& p : List(checks.front(), "pairs").values()) {
    const pb::Struct& pair = p.struct_value();
    EXPECT_TRUE(pair.fields().at("ok").bool_value()) << Str(pair, "reason");
    EXPECT_GT(pair.fields().at("mbps_ab").number_value(), 0);
    EXPECT_GT(pair.fields().at("mbps_ba").number_value(), 0);
  }
  EXPECT_EQ(CountLines(r[0].err, "refused (not an ftrun netcheck probe;"), 1) << r[0].err;
  EXPECT_EQ(CountLines(r[0].err, "refused (a wrong probe key;"), 1) << r[0].err;
  EXPECT_EQ(CountLines(r[0].err, "refused (no probe key in time;"), 1) << r[0].err;
  EXPECT_EQ(r[0].err.find("evil"), std::string::npos) << r[0].err;
  EXPECT_EQ(Count("world=4"), 4) << ReadFile(dir_ / "records");
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
  EXPECT_EQ(CountLines(r[2].err, "this node leaves the job: the network check found it faulty"), 1)
      << r[2].err;
  EXPECT_EQ(CountLines(r[2].err, "[error]"), 1) << "one line says why:\n" << r[2].err;
  EXPECT_NE(r[2].err.find("check command on " + HostOf(bad) + ": exit code 1"), std::string::npos)
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
  const std::string why =
      "the network check excluded " + HostOf(bad) + "; 3 node(s) left, --nnodes needs at least 4";
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
  ExpectRefusedByMaster({}, {"--network-check"},
                        "asks for --network-check, but this rendezvous server runs without it");
}

TEST_F(NetCheck, MasterWithTheCheckRefusesAnAgentWithoutIt) {
  auto rm =
      ExpectRefusedByMaster({"--network-check"}, {},
                            "has no network-check probe; start every agent with --network-check");
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
  ASSERT_TRUE(WaitFor([&] { return Count("world=6") == 6; }, 30s)) << agents[0]->Err() << c.Err();
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

}  // namespace
}  // namespace ftrun::testing
