// The fault record and the "restarting cannot help" exit code with the real ftrun binary:
// a script that raises the same exception at every attempt ends with exit code 70 and a
// fault_record.json naming it; a fault that differs between attempts ends with 1.
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/support/test_support.h"

namespace ftrun::testing {
namespace {

namespace fs = std::filesystem;
namespace pb = google::protobuf;

class FaultRecord : public ::testing::Test {
 protected:
  std::vector<std::string> Cmd(std::vector<std::string> options,
                               const std::vector<std::string>& actions) {
    return FakeWorkerJob({"--log-dir", dir_ / "logs", "--nproc-per-node", "2"}, options, actions);
  }
  // The one fault_record.json under the log directory, parsed.
  pb::Struct Record() {
    pb::Struct s;
    for (const auto& e : fs::recursive_directory_iterator(dir_.path() + "/logs")) {
      if (e.path().filename() == "fault_record.json") {
        EXPECT_TRUE(pb::util::JsonStringToMessage(ReadFile(e.path()), &s).ok());
      }
    }
    return s;
  }
  TempDir dir_;
};

TEST_F(FaultRecord, TheSameExceptionAtEveryAttemptExitsSeventy) {
  auto r = RunFtrun(Cmd({"--max-restarts", "2"},
                        {"if-rank", "1", "error-json", "ZeroDivisionError: division by zero",
                         "if-rank", "1", "exit", "1", "sleep", "30"}));
  EXPECT_EQ(r.exit_code, 70) << r.err;
  EXPECT_NE(r.err.find("restarting cannot help"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("division by zero"), std::string::npos) << r.err;
  pb::Struct rec = Record();
  ASSERT_TRUE(rec.fields().count("attempts")) << "no fault record";
  EXPECT_EQ(rec.fields().at("exit_code").number_value(), 70);
  EXPECT_FALSE(rec.fields().at("retryable").bool_value());
  EXPECT_EQ(rec.fields().at("restarts_used").number_value(), 2);
  EXPECT_EQ(rec.fields().at("attempts").list_value().values_size(), 3);
  const auto& root = rec.fields().at("root_cause").struct_value();
  EXPECT_EQ(root.fields().at("rank").number_value(), 1);
  EXPECT_EQ(root.fields().at("exit_code").number_value(), 1);
  EXPECT_NE(root.fields().at("message").string_value().find("division by zero"), std::string::npos);
}

TEST_F(FaultRecord, AFaultThatChangesBetweenAttemptsExitsOneWithARecord) {
  auto r = RunFtrun(Cmd({"--max-restarts", "1"},
                        {"if-rank", "0", "if-attempt", "0", "error-json", "first failure",
                         "if-rank", "0", "if-attempt", "1", "error-json", "second failure",
                         "if-rank", "0", "exit", "1", "sleep", "30"}));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.err.find("restarting cannot help"), std::string::npos) << r.err;
  pb::Struct rec = Record();
  ASSERT_TRUE(rec.fields().count("attempts")) << "no fault record";
  EXPECT_TRUE(rec.fields().at("retryable").bool_value());
  EXPECT_EQ(rec.fields().at("outcome").string_value(), "failed");
  const auto& attempts = rec.fields().at("attempts").list_value();
  ASSERT_EQ(attempts.values_size(), 2);
  const auto& first = attempts.values(0).struct_value();
  EXPECT_NE(first.fields().at("stop_reason").string_value().find("restart 1/1"), std::string::npos);
}

TEST_F(FaultRecord, ASignalledWorkerIsRecordedWithItsSignal) {
  auto r = RunFtrun(Cmd({}, {"if-rank", "0", "kill-self", "9", "sleep", "30"}));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  pb::Struct rec = Record();
  ASSERT_TRUE(rec.fields().count("root_cause")) << "no fault record";
  EXPECT_EQ(rec.fields().at("root_cause").struct_value().fields().at("signal").string_value(),
            "SIGKILL");
}

}  // namespace
}  // namespace ftrun::testing
