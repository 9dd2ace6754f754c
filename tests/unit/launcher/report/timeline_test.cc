// The timeline model of `ftrun report`: hand-made event records in, attempts, faults and the
// recovery phases out.
#include "launcher/report/timeline.h"

#include <gtest/gtest.h>

namespace ftrun::launcher::report {
namespace {

constexpr int64_t kT0 = 1'800'000'000'000;  // ms since the epoch

EventRecord R(const std::string& event, int64_t at_ms,
              std::map<std::string, std::string> fields = {}, const std::string& node = "n0") {
  EventRecord r;
  r.event = event;
  r.time_ms = kT0 + at_ms;
  r.node = node;
  r.fields = std::move(fields);
  r.fields["run_id"] = "job";
  return r;
}

// A crash in attempt 0 on n0, restarted, and the first step of attempt 1 reported.
std::vector<EventRecord> CrashAndRestart() {
  return {R("agent_started", 0, {{"version", "9.9"}}),
          R("round_started", 10, {{"restart_count", "0"}}),
          R("workers_spawned", 20, {{"attempt", "0"}}),
          R("first_step", 500, {{"attempt", "0"}, {"step", "0"}}),
          R("fault_detected", 5000,
            {{"kind", "exit"},
             {"rank", "2"},
             {"signal", "SIGKILL"},
             {"step", "24"},
             {"detect_ms", "0"}}),
          R("fault_reported", 5000, {{"rank", "2"}, {"message", "Signal 9 (SIGKILL)"}}),
          R("save_requested", 5010, {{"save_id", "1"}, {"step", "24"}}),
          R("save_acknowledged", 5200,
            {{"save_id", "1"}, {"ok", "true"}, {"finalize", "false"}, {"rank", "0"}}),
          R("fault_save_done", 5300, {{"how", "stop ordered"}}),
          R("workers_stopping", 5300, {{"signal", "SIGTERM"}}),
          R("workers_stopped", 5400, {{"attempt", "0"}}),
          R("round_started", 6400, {{"restart_count", "1"}}),
          R("workers_spawned", 6450, {{"attempt", "1"}}),
          R("first_step", 8450, {{"attempt", "1"}, {"step", "25"}}),
          R("job_finished", 20000, {{"outcome", "succeeded"}, {"exit_code", "0"}})};
}

TEST(ReportTimeline, SplitsARecoveryIntoItsSixPhases) {
  Timeline t = BuildTimeline(CrashAndRestart());
  EXPECT_EQ(t.run_id, "job");
  EXPECT_EQ(t.version, "9.9");
  EXPECT_EQ(t.outcome, "succeeded");
  ASSERT_EQ(t.attempts.size(), 2u);
  EXPECT_TRUE(t.attempts[0].ended_by_fault);
  EXPECT_EQ(t.attempts[0].end_ms, kT0 + 5400);
  EXPECT_FALSE(t.attempts[1].ended_by_fault);
  EXPECT_EQ(t.attempts[1].end_ms, kT0 + 20000);
  ASSERT_EQ(t.faults.size(), 1u);
  EXPECT_EQ(t.faults[0].rank, 2);
  EXPECT_EQ(t.faults[0].exit, "SIGKILL");
  EXPECT_EQ(t.faults[0].step, 24);
  EXPECT_EQ(t.faults[0].message, "Signal 9 (SIGKILL)");
  ASSERT_EQ(t.recoveries.size(), 1u);
  const Recovery& r = t.recoveries[0];
  ASSERT_EQ(r.phases.size(), 6u);
  const std::vector<std::pair<std::string, int64_t>> want = {{"detect", 0}, {"save", 300},
                                                             {"stop", 100}, {"rendezvous", 1000},
                                                             {"spawn", 50}, {"first step", 2000}};
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(r.phases[i].name, want[i].first);
    EXPECT_TRUE(r.phases[i].known) << want[i].first;
    EXPECT_EQ(r.phases[i].end_ms - r.phases[i].start_ms, want[i].second) << want[i].first;
  }
  EXPECT_EQ(r.steps_lost, 0);  // completed 24, resumed at 25
  EXPECT_TRUE(t.missing.empty()) << t.missing.front();
  // The fault-time save is a checkpoint taken.
  ASSERT_EQ(t.markers.size(), 1u);
  EXPECT_EQ(t.markers[0].kind, "checkpoint");
  EXPECT_NE(t.markers[0].label.find("step 24"), std::string::npos);
}

TEST(ReportTimeline, AHangIsDetectedAfterItsSilenceAndLostStepsCount) {
  auto records = CrashAndRestart();
  records[4] = R("fault_detected", 5000,
                 {{"kind", "hang"},
                  {"rank", "1"},
                  {"exitcode", "124"},
                  {"step", "24"},
                  {"detect_ms", "3000"}});
  records[13] = R("first_step", 8450, {{"attempt", "1"}, {"step", "20"}});  // from step 20
  Timeline t = BuildTimeline(records);
  ASSERT_EQ(t.recoveries.size(), 1u);
  const Phase& detect = t.recoveries[0].phases[0];
  EXPECT_EQ(detect.start_ms, kT0 + 2000);
  EXPECT_EQ(detect.end_ms, kT0 + 5000);
  EXPECT_EQ(t.recoveries[0].steps_lost, 5);  // 20..24 again
  EXPECT_EQ(t.faults[0].exit, "hang (no progress)");
}

TEST(ReportTimeline, APlainScriptsFirstStepIsUnknownNotGuessed) {
  std::vector<EventRecord> records;
  for (const auto& r : CrashAndRestart()) {
    if (r.event != "first_step") records.push_back(r);
  }
  Timeline t = BuildTimeline(records);
  ASSERT_EQ(t.recoveries.size(), 1u);
  EXPECT_TRUE(t.recoveries[0].phases[4].known);   // spawn
  EXPECT_FALSE(t.recoveries[0].phases[5].known);  // first step
  EXPECT_FALSE(t.recoveries[0].steps_lost);
  ASSERT_FALSE(t.missing.empty());
  EXPECT_NE(t.missing[0].find("first step"), std::string::npos);
}

TEST(ReportTimeline, TwoFaultsGiveTwoRecoveriesAndASecondRankOfTheSameStopIsOne) {
  auto records = CrashAndRestart();
  records.insert(records.begin() + 6,
                 R("fault_detected", 5001, {{"kind", "exit"}, {"rank", "3"}, {"exitcode", "1"}}));
  records.push_back(
      R("fault_detected", 21000, {{"kind", "exit"}, {"rank", "0"}, {"exitcode", "1"}}));
  records.push_back(R("workers_stopping", 21001));
  records.push_back(R("workers_stopped", 21100));
  Timeline t = BuildTimeline(records);
  EXPECT_EQ(t.faults.size(), 3u);
  ASSERT_EQ(t.recoveries.size(), 2u);
  EXPECT_EQ(t.recoveries[0].from_attempt, 0);
  EXPECT_EQ(t.recoveries[1].from_attempt, 1);
  EXPECT_FALSE(t.recoveries[1].phases[3].known);  // no next round (the job ended)
}

TEST(ReportTimeline, AnotherNodesFaultIsThisNodesRecovery) {
  std::vector<EventRecord> records = {
      R("agent_started", 0),
      R("round_started", 10),
      R("workers_spawned", 20),
      R("fault_detected", 3000, {{"kind", "elsewhere"}, {"why", "node n1 lost"}}),
      R("workers_stopping", 3001),
      R("workers_stopped", 3100),
      R("node_lost", 3050, {{"host", "hostB"}}, "n0"),
      R("round_started", 4000),
      R("workers_spawned", 4100)};
  Timeline t = BuildTimeline(records);
  // This node's log holds only the news: that is the fault it shows.
  ASSERT_EQ(t.faults.size(), 1u);
  EXPECT_EQ(t.faults[0].exit, "on another node");
  EXPECT_EQ(t.faults[0].message, "node n1 lost");
  // Beside the node's own record of that fault (a shared --event-log), the news is no fault.
  records.push_back(R("fault_detected", 2990, {{"kind", "exit"}, {"rank", "5"}}, "n1"));
  EXPECT_EQ(BuildTimeline(records).faults.size(), 1u);
  EXPECT_EQ(BuildTimeline(records).faults[0].rank, 5);
  records.pop_back();
  ASSERT_EQ(t.recoveries.size(), 1u);
  EXPECT_NE(t.recoveries[0].cause.find("node n1 lost"), std::string::npos);
  ASSERT_EQ(t.markers.size(), 1u);
  EXPECT_EQ(t.markers[0].kind, "lost");
  EXPECT_TRUE(t.attempts.back().running);  // no end logged
}

TEST(ReportTimeline, AnOlderLogWithoutTheBreakdownSaysSo) {
  std::vector<EventRecord> records = {
      R("round_started", 10), R("workers_spawned", 20),
      R("fault_reported", 3000, {{"rank", "1"}, {"exitcode", "-9"}}), R("round_started", 4000),
      R("workers_spawned", 4100)};
  Timeline t = BuildTimeline(records);
  ASSERT_EQ(t.faults.size(), 1u);
  EXPECT_EQ(t.faults[0].exit, "signal 9");
  bool said = false;
  for (const auto& m : t.missing) said |= m.find("fault_detected") != std::string::npos;
  EXPECT_TRUE(said);
}

TEST(ReportTimeline, NoRecordsSaysWhatIsMissing) {
  Timeline t = BuildTimeline({});
  EXPECT_TRUE(t.attempts.empty());
  ASSERT_EQ(t.missing.size(), 1u);
  EXPECT_NE(t.missing[0].find("no records"), std::string::npos);
}

}  // namespace
}  // namespace ftrun::launcher::report
