// msrun when a worker crashes: restarts with the scheduler, msrun's failure report, TTP grace.
#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

#include "tests/integration/msrun_fixture.h"

namespace ftrun::testing {
namespace {

using namespace std::chrono_literals;

std::string LastLine(const std::string& text) {
  auto lines = Lines(text);
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  return lines.empty() ? "" : lines.back();
}

TEST_F(Msrun, CrashRestartsTheJobWithItsScheduler) {
  auto r = Run(
      Cmd({"--worker_num", "2", "--local_worker_num", "2", "--join", "True", "--max_restarts", "1"},
          {"--steps", "3", "--crash-rank", "1", "--crash-at", "1"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto records = Records();
  EXPECT_EQ(OfRole(records, "worker").size(), 4u) << "two attempts of two workers";
  EXPECT_EQ(OfRole(records, "scheduler").size(), 2u) << "the scheduler restarts too";
  // Both attempts in one log each, the second after ftrun's marker.
  const std::string w1 = ReadFile(logs_ + "/worker_1.log");
  const size_t crash = w1.find("rank 1: crashing at step 1");
  const size_t marker = w1.find("[ftrun] restart_count=1");
  const size_t done = w1.find("rank 1: finalized");
  ASSERT_NE(crash, std::string::npos) << w1;
  ASSERT_NE(marker, std::string::npos) << w1;
  ASSERT_NE(done, std::string::npos) << w1;
  EXPECT_LT(crash, marker);
  EXPECT_LT(marker, done);
  const std::string sched = ReadFile(logs_ + "/scheduler.log");
  const size_t first = sched.find("cluster is ready");
  const size_t sched_marker = sched.find("[ftrun] restart_count=1");
  ASSERT_NE(sched_marker, std::string::npos) << sched;
  EXPECT_LT(first, sched_marker);
  EXPECT_NE(sched.find("cluster is ready", sched_marker), std::string::npos) << sched;
  EXPECT_NE(sched.find("every worker finalized", sched_marker), std::string::npos) << sched;
}

TEST_F(Msrun, CrashWithoutRestartsFailsAsMsrun) {
  auto r = Run(Cmd({"--worker_num", "2", "--local_worker_num", "2", "--join", "True"},
                   {"--steps", "3", "--crash-rank", "1", "--crash-at", "1", "--save-time", "5"}));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  pid_t crashed = 0;
  for (const auto& w : OfRole(Records(), "worker")) {
    if (w.env.at("RANK_ID") == "1") crashed = w.pid;
  }
  ASSERT_GT(crashed, 0);
  EXPECT_NE(r.err.find("Worker process " + std::to_string(crashed) +
                       " exit with exception. Error code: 3."),
            std::string::npos)
      << r.err;
  EXPECT_EQ(LastLine(r.err),
            "RuntimeError: Distributed job exited with exception. Please check logs in "
            "directory: " +
                logs_ + ".")
      << r.err;
}

// Three workers; rank 1 crashes at step 1. On the scheduler's abort the survivors take
// --save-time to finish (with TTP on: to save, then they exit 1 by themselves).
const std::vector<std::string> kCrashOnce = {"--steps",    "6", "--crash-rank", "1",
                                             "--crash-at", "1", "--step-time",  "0.1"};

TEST_F(Msrun, TtpGraceLetsTheSurvivorsSaveThenRestarts) {
  auto args = kCrashOnce;
  args.insert(args.end(), {"--save-time", "0.5"});
  // TTP_OT is 30 s: the job must go on as soon as the survivors are done, well before.
  auto r = Run(
      Cmd({"--worker_num", "3", "--local_worker_num", "3", "--join", "True", "--max_restarts", "1"},
          args),
      {{"MS_ENABLE_TFT", "{TTP:1}"}, {"TTP_OT", "30"}}, 25s);
  ASSERT_FALSE(r.timed_out) << r.err;
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("waiting up to 30s for the surviving workers"), std::string::npos) << r.err;
  auto records = Records();
  for (int rank : {0, 2}) {
    SCOPED_TRACE(rank);
    const std::string saved = rec_ + "/ttp_saved_rank_" + std::to_string(rank);
    ASSERT_TRUE(FileExists(saved));
    const pid_t saver = ReadPid(saved);
    // The first attempt's process saved, and exited by itself (not by ftrun's signal).
    EXPECT_NE(r.err.find("worker stopped local_rank=" + std::to_string(rank) +
                         " rank=" + std::to_string(rank) + " pid=" + std::to_string(saver) +
                         " attempt=0 status=exit code 1"),
              std::string::npos)
        << r.err;
  }
  EXPECT_FALSE(FileExists(rec_ + "/ttp_saved_rank_1")) << "the crashed rank saves nothing";
  EXPECT_EQ(OfRole(records, "worker").size(), 6u);
}

TEST_F(Msrun, WithoutTftTheSurvivorsAreStoppedAtOnce) {
  auto args = kCrashOnce;
  args.insert(args.end(), {"--save-time", "20"});  // only a stop ends the survivors early
  auto r = Run(
      Cmd({"--worker_num", "3", "--local_worker_num", "3", "--join", "True", "--max_restarts", "1"},
          args),
      {{"TTP_OT", "30"}}, 25s);
  ASSERT_FALSE(r.timed_out) << r.err;
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("waiting up to"), std::string::npos) << r.err;
  for (int rank : {0, 2}) {
    SCOPED_TRACE(rank);
    EXPECT_FALSE(FileExists(rec_ + "/ttp_saved_rank_" + std::to_string(rank)));
    EXPECT_TRUE(
        std::regex_search(r.err, std::regex("worker stopped local_rank=" + std::to_string(rank) +
                                            " rank=\\d+ pid=\\d+ attempt=0 status=signal "
                                            "15 \\(SIGTERM\\)")))
        << r.err;
  }
  EXPECT_EQ(OfRole(Records(), "worker").size(), 6u);
}

}  // namespace
}  // namespace ftrun::testing
