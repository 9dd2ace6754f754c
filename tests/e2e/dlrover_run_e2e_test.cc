// dlrover-run end to end with real torch.distributed (Debian's python3-torch, gloo): two
// agents on loopback finding each other at DLROVER_MASTER_ADDR, dlrover's --precheck 2 (the
// network check and comm_check.py) before the first round, --node-unit 2,
// --save-at-breakpoint, and a rank killed once (tests/e2e/workers/dlrover_train.py).
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "launcher/config/host.h"
#include "tests/support/test_support.h"

namespace ftrun::testing {
namespace {

namespace pb = google::protobuf;
using namespace std::chrono_literals;

constexpr const char* kPython = "/usr/bin/python3";
constexpr int kSteps = 6;

pb::Struct ParseJson(const std::string& text) {
  pb::Struct s;
  auto status = pb::util::JsonStringToMessage(text, &s);
  EXPECT_TRUE(status.ok()) << text << ": " << status.message();
  return s;
}

int Occurrences(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++n;
  }
  return n;
}

// The index of the first event-log record whose "event" is `event` (-1: none).
int FirstEvent(const std::vector<pb::Struct>& events, const std::string& event) {
  for (size_t i = 0; i < events.size(); ++i) {
    auto it = events[i].fields().find("event");
    if (it != events[i].fields().end() && it->second.string_value() == event) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

int CountEvents(const std::vector<pb::Struct>& events, const std::string& event) {
  int n = 0;
  for (const auto& e : events) {
    auto it = e.fields().find("event");
    n += it != e.fields().end() && it->second.string_value() == event;
  }
  return n;
}

class DlroverRunE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    ChildRun probe(kPython, {"-c", "import torch"});
    auto r = probe.Wait(60s);
    ASSERT_EQ(r.exit_code, 0) << "Debian's python3-torch is required (scripts/install-deps.sh): "
                              << r.err;
  }
  TempDir dir_;
};

TEST_F(DlroverRunE2E, TwoAgentsPrecheckTwoNodeUnitSaveAtBreakpointAndARestart) {
  const std::string port = std::to_string(TestPort());
  const std::string out = dir_ / "out";
  std::filesystem::create_directories(out);
  const std::map<std::string, std::string> env = {{"PYTHON_EXEC", kPython},
                                                  {"DLROVER_MASTER_ADDR", "127.0.0.1:" + port},
                                                  {"ELASTIC_JOB_NAME", "dlrover-e2e"}};
  // The test's own environment must not choose for the job.
  const std::vector<std::string> unset = {
      "NODE_NUM",          "LOGLEVEL",         "PET_NNODES",     "PET_NPROC_PER_NODE",
      "PET_RDZV_ENDPOINT", "PET_RDZV_BACKEND", "FTRUN_EVENT_LOG"};
  const std::vector<std::string> argv = {"dlrover-run",
                                         "--nnodes",
                                         "2",
                                         "--nproc_per_node",
                                         "2",
                                         "--precheck",
                                         "2",
                                         "--node_unit",
                                         "2",
                                         "--save_at_breakpoint",
                                         "--max_restarts",
                                         "1",
                                         "--event-log",
                                         dir_ / "events",
                                         "--log-dir",
                                         dir_ / "logs",
                                         SourceDir() + "/tests/e2e/workers/dlrover_train.py",
                                         out,
                                         "--world",
                                         "4",
                                         "--role",
                                         "dlrover-trainer",
                                         "--steps",
                                         std::to_string(kSteps),
                                         "--crash-rank",
                                         "3",
                                         "--crash-step",
                                         "3"};
  // The first agent hosts the rendezvous at DLROVER_MASTER_ADDR; the second joins it.
  ChildRun a(FtrunBinary(), argv, env, unset);
  ASSERT_TRUE(WaitFor([&] { return a.Err().find("joined the job") != std::string::npos; }, 60s))
      << a.Err();
  ChildRun b(FtrunBinary(), argv, env, unset);
  auto ra = a.Wait(240s), rb = b.Wait(240s);
  ASSERT_EQ(ra.exit_code, 0) << ra.out << ra.err;
  ASSERT_EQ(rb.exit_code, 0) << rb.out << rb.err;
  const std::string outs = ra.out + rb.out, errs = ra.err + rb.err;

  for (const auto* r : {&ra, &rb}) {
    EXPECT_NE(r->err.find("rdzv_backend=c10d"), std::string::npos) << r->err;
    EXPECT_NE(r->err.find("run_id=dlrover-e2e"), std::string::npos) << r->err;
    // --save-at-breakpoint is ftrun's to do: no warning; these workers keep no flash
    // checkpoint, which the restart's breakpoint says once.
    EXPECT_EQ(Occurrences(r->err, "[warning] --save-at-breakpoint"), 0) << r->err;
    EXPECT_EQ(Occurrences(r->err, "no rank saved a memory snapshot here (--save-at-breakpoint"), 1)
        << r->err;
    // The network check's table in both logs, once: the restart brought no new node.
    EXPECT_EQ(Occurrences(r->err, "a->b MB/s  b->a MB/s   rtt ms  result"), 1) << r->err;
    EXPECT_EQ(Occurrences(r->err, " MB/s  healthy"), 2) << r->err;
  }
  // --precheck 2: comm_check.py ran on the pair (rank 0 of it prints one JSON line).
  const size_t json_at = outs.find("{\"rank\":0,\"world_size\":2,\"backend\":\"gloo\"");
  ASSERT_NE(json_at, std::string::npos) << outs;
  const pb::Struct check = ParseJson(outs.substr(json_at, outs.find('\n', json_at) - json_at));
  EXPECT_GT(check.fields().at("allreduce_ms").number_value(), 0);
  EXPECT_EQ(Occurrences(outs, "\"backend\":\"gloo\""), 1) << outs;

  // The rank was killed once, a survivor saved the last complete step (--save-at-breakpoint),
  // and the one restart resumed from it: every rank ends in attempt 1 with the full total.
  EXPECT_NE(outs.find("rank 3: injected crash at step 3"), std::string::npos) << outs;
  EXPECT_NE(errs.find("saved step 2 (saver "), std::string::npos) << errs;
  EXPECT_NE(errs.find("Worker group FAILED. 1/1 attempts left"), std::string::npos) << errs;
  const double total = kSteps * 10.0 + 4.0 * kSteps * (kSteps - 1) / 2;  // sum of the reductions
  for (int rank = 0; rank < 4; ++rank) {
    const std::string file = out + "/result." + std::to_string(rank) + ".json";
    ASSERT_TRUE(FileExists(file)) << outs << errs;
    const pb::Struct res = ParseJson(ReadFile(file));
    EXPECT_EQ(res.fields().at("world_size").number_value(), 4);
    EXPECT_EQ(res.fields().at("attempt").number_value(), 1) << rank;
    EXPECT_EQ(res.fields().at("resumed_at").number_value(), 3) << rank;
    EXPECT_EQ(res.fields().at("total").number_value(), total) << rank;
    EXPECT_EQ(res.fields().at("role").string_value(), "dlrover-trainer");
    EXPECT_EQ(res.fields().at("run_id").string_value(), "dlrover-e2e");
  }
  // Workers started twice on every rank: attempts 0 and 1.
  auto starts = Lines(ReadFile(out + "/starts"));
  EXPECT_EQ(starts.size(), 8u) << ReadFile(out + "/starts");

  // The event log of both agents (one file, appended in order): the check finished before
  // any worker of the first round started, and there was exactly one restart.
  std::vector<pb::Struct> events;
  for (const auto& line : Lines(ReadFile(dir_ / "events"))) events.push_back(ParseJson(line));
  const int check_done = FirstEvent(events, "network_check");
  const int first_spawn = FirstEvent(events, "workers_spawned");
  ASSERT_GE(check_done, 0) << ReadFile(dir_ / "events");
  ASSERT_GE(first_spawn, 0);
  EXPECT_LT(FirstEvent(events, "network_check_started"), check_done);
  EXPECT_LT(check_done, first_spawn) << ReadFile(dir_ / "events");
  EXPECT_EQ(CountEvents(events, "network_check_started"), 1) << "no check on the restart";
  EXPECT_EQ(CountEvents(events, "restart"), 2) << "one restart, seen by both agents";
  EXPECT_EQ(CountEvents(events, "workers_spawned"), 4) << "2 agents x 2 attempts";
}

}  // namespace
}  // namespace ftrun::testing
