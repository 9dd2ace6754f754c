// The agent's collaborators on their own: the metrics it keeps (with a fake clock), the
// records it writes to the event log, and the worker channels it opens.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "launcher/agent/agent_events.h"
#include "launcher/agent/agent_metrics.h"
#include "launcher/agent/worker_channels.h"
#include "tests/support/fake_clock.h"

namespace ftrun {
namespace {

using launcher::AgentEvents;
using launcher::AgentMetrics;
using launcher::WorkerChannels;

class CollaboratorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ftrun-collab-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir); }

  boost::asio::io_context io;
  testing::FakeClock clock;
  launcher::LaunchConfig config;
  std::string dir;
};

bool Has(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

TEST_F(CollaboratorsTest, MetricsMeasureTheTimeFromTheFaultToTheNextRound) {
  size_t live = 2;
  AgentMetrics m(
      io, config, clock, [&] { return live; }, [] { return std::string(); });
  EXPECT_TRUE(Has(m.Render(), "ftrun_time_to_recover_seconds -1"));
  rendezvous::NodeAssignment a;
  a.restart_count = 1;
  a.group_world_size = 3;
  a.world_size = 6;
  m.WorkerFailed(1700000000);
  clock.Advance(std::chrono::milliseconds(2500));
  m.StopAsked();  // the recovery clock started at the fault, not here
  clock.Advance(std::chrono::milliseconds(500));
  m.RoundStarted(a);
  const std::string text = m.Render();
  EXPECT_TRUE(Has(text, "ftrun_time_to_recover_seconds 3"));
  EXPECT_TRUE(Has(text, "ftrun_last_fault_timestamp_seconds 1700000000"));
  EXPECT_TRUE(Has(text, "ftrun_worker_failures_total 1"));
  EXPECT_TRUE(Has(text, "ftrun_restarts 1"));
  EXPECT_TRUE(Has(text, "ftrun_rendezvous_members 3"));
  EXPECT_TRUE(Has(text, "ftrun_world_size 6"));
  EXPECT_TRUE(Has(text, "ftrun_workers_live 2"));
}

TEST_F(CollaboratorsTest, MetricsCountSavesAndKeepTheLastDuration) {
  AgentMetrics m(
      io, config, clock, [] { return size_t{0}; }, [] { return std::string("x 1\n"); });
  m.SaveAcknowledged(true, 0.25);
  m.SaveAcknowledged(false, 1.5);
  const std::string text = m.Render();
  EXPECT_TRUE(Has(text, R"(ftrun_saves_total{outcome="saved"} 1)"));
  EXPECT_TRUE(Has(text, R"(ftrun_saves_total{outcome="failed"} 1)"));
  EXPECT_TRUE(Has(text, "ftrun_last_save_duration_seconds 1.5"));
  EXPECT_TRUE(Has(text, "x 1"));  // the hosted server's own metrics follow
}

TEST_F(CollaboratorsTest, EventsAreTaggedWithTheRunningRound) {
  auto log = EventLog::Open(dir + "/events.jsonl", "job", "node0");
  ASSERT_TRUE(log) << log.error().message;
  AgentEvents events(*log);
  events.NodeExcluded("before any round");
  events.SetRound(4);
  events.Signal(SIGTERM);
  events.RoundStopping(5, "a node left", 2);  // about round 5, whatever runs
  events.SetRound(std::nullopt);
  events.JobFinished(false, 1, "budget spent");
  std::ifstream in(dir + "/events.jsonl");
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_NE(lines[0].find(R"("event":"node_excluded")"), std::string::npos);
  EXPECT_EQ(lines[0].find(R"("round")"), std::string::npos);
  EXPECT_NE(lines[1].find(R"("signal":"SIGTERM")"), std::string::npos);
  EXPECT_NE(lines[1].find(R"("round":4)"), std::string::npos);
  EXPECT_NE(lines[2].find(R"("round":5)"), std::string::npos);
  EXPECT_NE(lines[2].find(R"("restart_count":2)"), std::string::npos);
  EXPECT_NE(lines[3].find(R"("outcome":"failed")"), std::string::npos);
  EXPECT_EQ(lines[3].find(R"("round")"), std::string::npos);
}

TEST_F(CollaboratorsTest, TheFirstStepOfAnAttemptIsTheFirstOneCompletedInIt) {
  auto log = EventLog::Open(dir + "/events.jsonl", "job", "node0");
  ASSERT_TRUE(log) << log.error().message;
  AgentEvents events(*log);
  events.Progress(0, 3, false);  // before any attempt: nothing
  // A resumed attempt: the restored step first, then the update of step 12 and its end.
  events.AttemptStarted(1);
  events.Progress(0, 11, false);
  events.Progress(1, 11, false);
  events.Progress(0, 12, true);
  events.Progress(1, 11, false);  // a late restore report is not a step done
  events.Progress(1, 12, false);
  events.Progress(0, 13, false);  // once per attempt
  // A fresh attempt whose ranks report updates: the end of the first one.
  events.AttemptStarted(2);
  events.Progress(0, 0, true);
  events.Progress(0, 0, false);
  // Memory snapshots: the first restore of an attempt, and taken ones at most every 10 s.
  events.CheckpointRestored(0, 11);
  events.CheckpointRestored(1, 11);
  events.CheckpointTaken(0, 1);
  events.CheckpointTaken(0, 2);
  events.CheckpointTaken(1, 2);
  std::ifstream in(dir + "/events.jsonl");
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_NE(lines[0].find(R"("event":"first_step")"), std::string::npos);
  EXPECT_NE(lines[0].find(R"("step":12)"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find(R"("resumed_from":11)"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find(R"("local_rank":1)"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find(R"("step":0)"), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find(R"("resumed_from":-1)"), std::string::npos) << lines[1];
  EXPECT_NE(lines[2].find(R"("event":"checkpoint_restored")"), std::string::npos);
  EXPECT_NE(lines[3].find(R"("event":"checkpoint_taken")"), std::string::npos);
  EXPECT_NE(lines[3].find(R"("step":1)"), std::string::npos);
}

TEST_F(CollaboratorsTest, ChannelsTellTheWorkersWhereTheControlSocketIs) {
  config.save_timeout = std::chrono::duration<double>(7.5);
  const auto run_started = std::chrono::system_clock::time_point(std::chrono::milliseconds(1500));
  WorkerChannels channels(io, config, run_started, {}, [] { return nullptr; });
  ASSERT_TRUE(channels.Start({{"TMPDIR", dir}}, ""));
  ASSERT_NE(channels.control(), nullptr);
  const EnvMap env = channels.WorkerEnv();
  const std::string socket = Lookup(env, "FTRUN_CONTROL_SOCKET").value_or("");
  EXPECT_EQ(socket.rfind(dir, 0), 0u) << socket;
  EXPECT_EQ(Lookup(env, "FTRUN_SAVE_TIMEOUT"), "7.5");
  EXPECT_EQ(Lookup(env, "FTRUN_STACK_SIGNAL"), std::to_string(WorkerChannels::StackDumpSignal()));
  EXPECT_EQ(Lookup(env, "FTRUN_RUN_STARTED"), "1.500000");
  channels.Stop();
}

TEST_F(CollaboratorsTest, AWatchdogFifoThatCannotBeServedIsAnErrorNamingIt) {
  const std::string fifo = dir + "/no/such/dir/watchdog";
  WorkerChannels channels(io, config, {}, {}, [] { return nullptr; });
  auto s = channels.Start({{"TMPDIR", dir}}, fifo);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("TORCHELASTIC_ENABLE_FILE_TIMER=1"), std::string::npos);
  EXPECT_NE(s.error().message.find(fifo), std::string::npos) << s.error().message;
  channels.Stop();
}

}  // namespace
}  // namespace ftrun
