// FaultHistory (launcher/agent/fault_record.h): when restarting cannot help, and what the
// fault record holds.
#include "launcher/agent/fault_record.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

namespace ftrun::launcher {
namespace {

WorkerFailure Raised(int rank, const std::string& message) {
  WorkerFailure f;
  f.rank = rank;
  f.exitcode = 1;
  f.error_file = "/logs/attempt_0/" + std::to_string(rank) + "/error.json";
  f.message = message;
  f.host = "n1";
  f.timestamp = 100 + rank;
  return f;
}

WorkerFailure Killed(int rank) {
  WorkerFailure f;
  f.rank = rank;
  f.exitcode = -9;
  f.error_file = "<N/A>";
  f.message = "Signal 9 (SIGKILL) received by PID 7";
  f.host = "n1";
  return f;
}

const std::string kTrace = "Traceback (most recent call last):\n  ...\nValueError: bad shape\n";

TEST(FaultHistory, TheSameExceptionTwiceMeansRestartingCannotHelp) {
  FaultHistory h;
  h.RoundStarted(0, 0, 10);
  h.LocalFailure(Raised(3, kTrace));
  h.RoundStopping("worker rank 3 failed; restart 1/1");
  h.RoundStarted(1, 1, 20);
  h.LocalFailure(Raised(2, kTrace));
  JobResult result{false, {Raised(2, kTrace)}, "restarts exhausted"};
  auto repeated = h.RepeatedException(result);
  ASSERT_TRUE(repeated);
  EXPECT_EQ(*repeated, "ValueError: bad shape");
}

TEST(FaultHistory, DifferentFaultsSignalsOrOneAttemptCanStillBeHelped) {
  JobResult result{false, {Raised(0, kTrace)}, "restarts exhausted"};
  FaultHistory one;
  one.RoundStarted(0, 0, 10);
  one.LocalFailure(Raised(0, kTrace));
  EXPECT_FALSE(one.RepeatedException(result)) << "one attempt proves nothing";

  FaultHistory other;
  other.RoundStarted(0, 0, 10);
  other.LocalFailure(Raised(0, "RuntimeError: NCCL timeout\n"));
  other.RoundStarted(1, 1, 20);
  EXPECT_FALSE(other.RepeatedException(result));

  FaultHistory killed;
  killed.RoundStarted(0, 0, 10);
  killed.LocalFailure(Killed(0));
  killed.RoundStarted(1, 1, 20);
  EXPECT_FALSE(killed.RepeatedException(JobResult{false, {Killed(0)}, "exhausted"}));

  FaultHistory ok;
  ok.RoundStarted(0, 0, 10);
  ok.LocalFailure(Raised(0, kTrace));
  ok.RoundStarted(1, 1, 20);
  EXPECT_FALSE(ok.RepeatedException(JobResult{true, {}, "all succeeded"}));
}

TEST(FaultHistory, TheRecordNamesTheRootCauseTheAttemptsAndTheSteps) {
  FaultHistory h;
  h.RoundStarted(0, 0, 10);
  h.LocalFailure(Killed(1));
  h.RoundStopping("worker rank 1 failed; restart 1/3");
  h.RoundStarted(1, 1, 20);
  FaultRecordContext c;
  c.run_id = "job7";
  c.host = "n1";
  c.max_restarts = 3;
  c.exit_code = 1;
  c.last_step = 41;
  c.newest_snapshot = 40;
  google::protobuf::Struct s;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(
                  h.RecordJson(JobResult{false, {Killed(1)}, "stopped"}, c), &s)
                  .ok());
  const auto& f = s.fields();
  EXPECT_EQ(f.at("run_id").string_value(), "job7");
  EXPECT_EQ(f.at("restarts_used").number_value(), 1);
  EXPECT_EQ(f.at("max_restarts").number_value(), 3);
  EXPECT_EQ(f.at("last_step").number_value(), 41);
  EXPECT_EQ(f.at("newest_snapshot_step").number_value(), 40);
  EXPECT_TRUE(f.at("retryable").bool_value());
  EXPECT_EQ(f.at("root_cause").struct_value().fields().at("signal").string_value(), "SIGKILL");
  ASSERT_EQ(f.at("attempts").list_value().values_size(), 2);
  EXPECT_EQ(f.at("attempts")
                .list_value()
                .values(0)
                .struct_value()
                .fields()
                .at("stop_reason")
                .string_value(),
            "worker rank 1 failed; restart 1/3");
}

}  // namespace
}  // namespace ftrun::launcher
