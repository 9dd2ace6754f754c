// The NetCheck fixture and helpers shared by netcheck_test.cc and netcheck_switchbox_test.cc
// (netcheck_netns_test.cc uses the helpers).
#pragma once

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "launcher/config/host.h"
#include "tests/support/test_support.h"

namespace ftrun::testing {

inline std::string Str(const google::protobuf::Struct& s, const std::string& key) {
  auto it = s.fields().find(key);
  return it == s.fields().end() ? "<unset>" : it->second.string_value();
}

inline const google::protobuf::ListValue& List(const google::protobuf::Struct& s,
                                               const std::string& key) {
  static const google::protobuf::ListValue kEmpty;
  auto it = s.fields().find(key);
  return it == s.fields().end() ? kEmpty : it->second.list_value();
}

inline int CountLines(const std::string& text, const std::string& needle) {
  int n = 0;
  for (const auto& l : Lines(text)) n += l.find(needle) != std::string::npos;
  return n;
}

// The options every agent of these tests shares: its logs and event log in `dir`, two
// workers, and the c10d rendezvous `run_id` at `endpoint`.
inline std::vector<std::string> AgentArgs(const TempDir& dir, const std::string& nnodes,
                                          const std::string& endpoint, const std::string& run_id,
                                          const std::string& conf) {
  return {"--log-dir", dir / "logs", "--nproc-per-node", "2",    "--event-log",     dir / "events",
          "--nnodes",  nnodes,       "--rdzv-backend",   "c10d", "--rdzv-endpoint", endpoint,
          "--rdzv-id", run_id,       "--rdzv-conf",      conf};
}

class NetCheck : public ::testing::Test {
 protected:
  void SetUp() override { port_ = std::to_string(TestPort()); }

  // ftrun <dynamic rendezvous on 127.0.0.1:port_> <options> --no-python fake_worker <actions>
  // (1 MiB each way per pair unless `bytes` says otherwise.)
  std::vector<std::string> Cmd(const std::string& nnodes, std::vector<std::string> options,
                               const std::vector<std::string>& actions,
                               const std::string& conf = kFastConf,
                               const std::string& bytes = "1MiB") {
    std::vector<std::string> argv = AgentArgs(dir_, nnodes, "127.0.0.1:" + port_, "job", conf);
    argv.insert(argv.end(), {"--network-check-bytes", bytes});
    argv.insert(argv.end(), options.begin(), options.end());
    argv.push_back("--no-python");
    argv.push_back(FakeWorkerBinary());
    argv.insert(argv.end(), actions.begin(), actions.end());
    return argv;
  }
  std::vector<std::string> Record() { return {"record", dir_ / "records"}; }

  // An agent (with `options`) against `ftrun master` (with `master_options`), which refuses
  // it: the agent exits 1 with one error line that contains `why`. Returns the master's run.
  RunResult ExpectRefusedByMaster(std::vector<std::string> master_options,
                                  const std::vector<std::string>& options, const std::string& why) {
    std::vector<std::string> argv = {"master", "--port",    port_, "--nnodes",
                                     "2",      "--rdzv-id", "job"};
    argv.insert(argv.end(), master_options.begin(), master_options.end());
    ChildRun master(FtrunBinary(), argv);
    EXPECT_TRUE(WaitFor([&] { return master.Err().find("listening") != std::string::npos; },
                        std::chrono::seconds(20)));
    auto r = RunFtrun(Cmd("2", options, Record()), {}, std::chrono::seconds(30));
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_EQ(CountLines(r.err, "[error]"), 1) << r.err;
    EXPECT_NE(r.err.find(why), std::string::npos) << r.err;
    master.Signal(SIGTERM);
    return master.Wait(std::chrono::seconds(30));
  }

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
                          std::chrono::seconds(20)))
          << "agent " << i << ":\n"
          << a.Err();
    }
    return agents;
  }

  int Count(const std::string& needle) { return CountLines(ReadFile(dir_ / "records"), needle); }
  // The event log's records of one kind.
  std::vector<google::protobuf::Struct> Events(const std::string& event) {
    std::vector<google::protobuf::Struct> out;
    for (const auto& line : Lines(ReadFile(dir_ / "events"))) {
      google::protobuf::Struct s;
      if (!google::protobuf::util::JsonStringToMessage(line, &s).ok()) {
        ADD_FAILURE() << "not JSON: " << line;
        continue;
      }
      if (Str(s, "event") == event) out.push_back(s);
    }
    return out;
  }
  // The verdict the network_check record `check` gives `node`.
  static std::string Verdict(const google::protobuf::Struct& check, const std::string& node) {
    for (const auto& n : List(check, "nodes").values()) {
      if (Str(n.struct_value(), "node") == node) return Str(n.struct_value(), "verdict");
    }
    return "<absent>";
  }
  // The node `node` was paired with in round 0.
  static std::string Round0Partner(const google::protobuf::Struct& check, const std::string& node) {
    for (const auto& p : List(check, "pairs").values()) {
      const google::protobuf::Struct& s = p.struct_value();
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
    std::vector<std::string> argv = {"--log-dir",   dir_ / "logs",   "--nproc-per-node", "2",
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

}  // namespace ftrun::testing
