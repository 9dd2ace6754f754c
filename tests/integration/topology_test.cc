// Topology-aware rank order end to end: `ftrun master` and three agents on loopback whose
// switch paths come from FTRUN_SWITCH_PATH and from --topology-file; the group ranks follow
// the switches, whatever the join order, and `ftrun status`, the event log and each worker's
// GROUP_RANK agree.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>

#include "launcher/config/host.h"
#include "tests/support/test_support.h"

namespace ftrun::testing {
namespace {

using namespace std::chrono_literals;

class Topology : public ::testing::Test {
 protected:
  std::unique_ptr<ChildRun> Agent(const std::string& name, std::vector<std::string> extra,
                                  std::map<std::string, std::string> env) {
    std::vector<std::string> argv = {"--log-dir",        dir_ / ("logs-" + name),
                                     "--nnodes",         "3",
                                     "--nproc-per-node", "1",
                                     "--rdzv-backend",   "c10d",
                                     "--rdzv-endpoint",  "127.0.0.1:" + port_,
                                     "--rdzv-id",        "topo"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    for (const char* a :
         {"--no-python", "<worker>", "record", "<records>", "wait-file", "<done>"}) {
      argv.push_back(a);
    }
    argv[argv.size() - 5] = FakeWorkerBinary();
    argv[argv.size() - 3] = dir_ / ("records-" + name);
    argv[argv.size() - 1] = dir_ / "done";
    return std::make_unique<ChildRun>(FtrunBinary(), argv, env);
  }
  // The GROUP_RANK the worker of agent `name` recorded (-1: none yet).
  int GroupRank(const std::string& name) {
    static const std::regex re("group=([0-9]+)");
    std::smatch m;
    const std::string records = ReadFile(dir_ / ("records-" + name));
    return std::regex_search(records, m, re) ? std::stoi(m[1]) : -1;
  }

  TempDir dir_;
  std::string port_ = std::to_string(TestPort());
};

TEST_F(Topology, GroupRanksFollowTheSwitchesFromTheEnvironmentAndTheFile) {
  ChildRun master(FtrunBinary(), {"master", "--port", port_, "--nnodes", "3", "--rdzv-id", "topo",
                                  "--event-log", dir_ / "events.jsonl"});
  // The agents' endpoint is local: an agent that found nobody listening there would host the
  // rendezvous itself (as torchrun's c10d agents do), and the master would then find its port
  // taken. The master listens first.
  ASSERT_TRUE(WaitFor(
      [&] { return master.Err().find("rendezvous server listening") != std::string::npos; }, 20s))
      << master.Err();
  // DLRover's format; this machine is 127.0.0.1 (loopback is one of its addresses).
  std::ofstream(dir_ / "topology.txt") << "# asw psw ip\nasw-1 psw-0 127.0.0.1\n";
  // Joining in the reverse of the switch order: c (asw-2), then the file's node, then a.
  auto c = Agent("c", {}, {{"FTRUN_SWITCH_PATH", "asw-2/psw-0"}});
  ASSERT_TRUE(WaitFor([&] { return master.Err().find("joined") != std::string::npos; }, 20s))
      << master.Err();
  auto b = Agent("b", {"--topology-file", dir_ / "topology.txt"}, {});
  ASSERT_TRUE(WaitFor(
      [&] { return b->Err().find("topology switch_path=asw-1/psw-0") != std::string::npos; }, 20s))
      << b->Err();
  auto a = Agent("a", {}, {{"FTRUN_SWITCH_PATH", "asw-0/psw-0"}});
  ASSERT_TRUE(WaitFor(
      [&] { return GroupRank("a") >= 0 && GroupRank("b") >= 0 && GroupRank("c") >= 0; }, 30s))
      << master.Err() << a->Err();
  EXPECT_EQ(GroupRank("a"), 0);
  EXPECT_EQ(GroupRank("b"), 1);
  EXPECT_EQ(GroupRank("c"), 2);
  auto st = RunFtrun({"status", "127.0.0.1:" + port_});
  EXPECT_NE(st.out.find("SWITCHES"), std::string::npos) << st.out;
  EXPECT_NE(st.out.find("asw-1/psw-0"), std::string::npos) << st.out;
  EXPECT_NE(master.Err().find("by_switch=\"0:asw-0/psw-0 1:asw-1/psw-0 2:asw-2/psw-0\""),
            std::string::npos)
      << master.Err();
  std::ofstream(dir_ / "done") << "";
  for (auto* agent : {a.get(), b.get(), c.get()}) EXPECT_EQ(agent->Wait(30s).exit_code, 0);
  EXPECT_EQ(master.Wait(30s).exit_code, 0);
  EXPECT_NE(ReadFile(dir_ / "events.jsonl")
                .find("\"switch_paths\":[\"asw-0/psw-0\",\"asw-1/psw-0\",\"asw-2/psw-0\"]"),
            std::string::npos);
}

TEST_F(Topology, ABadTopologyFileOrPathIsOneLineAndExitTwo) {
  std::ofstream(dir_ / "bad.txt") << "asw-1 psw-0 10.0.0.1\n10.0.0.2\n";
  auto bad =
      RunFtrun({"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:" + port_,
                "--topology-file", dir_ / "bad.txt", "--no-python", "/bin/true"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("bad.txt line 2"), std::string::npos) << bad.err;
  auto env = RunFtrun({"--no-python", "/bin/true"}, {{"FTRUN_SWITCH_PATH", "asw 1"}});
  EXPECT_EQ(env.exit_code, 2);
  EXPECT_NE(env.err.find("FTRUN_SWITCH_PATH"), std::string::npos) << env.err;
}

}  // namespace
}  // namespace ftrun::testing
