#include "launcher/workers/failure_report.h"

#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>

namespace ftrun::launcher {
namespace {

std::string TempFile(const std::string& name, const std::string& content) {
  auto p = std::filesystem::temp_directory_path() / ("ftrun_fr_" + name);
  std::ofstream(p) << content;
  return p.string();
}

TEST(FailureReport, ExitCodeWithoutErrorFile) {
  auto f = DescribeFailure(1, 5, 1234, ExitStatus{3, 0}, "/nonexistent/error.json", "node0", 100);
  EXPECT_EQ(f.exitcode, 3);
  EXPECT_EQ(f.rank, 5);
  EXPECT_EQ(f.local_rank, 1);
  EXPECT_EQ(f.error_file, "<N/A>");
  EXPECT_EQ(f.timestamp, 100);
  EXPECT_EQ(f.message,
            "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html");
}

TEST(FailureReport, SignalDeath) {
  auto f = DescribeFailure(0, 0, 42, ExitStatus{0, SIGKILL}, "", "h", 1);
  EXPECT_EQ(f.exitcode, -9);
  EXPECT_EQ(f.message, "Signal 9 (SIGKILL) received by PID 42");
}

TEST(FailureReport, RecordStyleErrorFile) {
  std::string path = TempFile(
      "record.json",
      R"({"message": {"message": "ValueError: bad", "extraInfo": {"py_callstack": "Traceback:\nValueError: bad", "timestamp": "1700000000"}}})");
  auto f = DescribeFailure(0, 0, 1, ExitStatus{1, 0}, path, "h", 5);
  EXPECT_EQ(f.error_file, path);
  EXPECT_EQ(f.message, "Traceback:\nValueError: bad");
  EXPECT_EQ(f.timestamp, 1700000000);
  EXPECT_FALSE(f.error_json.empty());
}

TEST(FailureReport, PlainStringMessageFormat) {
  std::string path = TempFile("plain.json", R"({"message": "boom", "timestamp": 12})");
  auto f = DescribeFailure(0, 0, 1, ExitStatus{1, 0}, path, "h", 5);
  EXPECT_EQ(f.message, "boom");
  EXPECT_EQ(f.timestamp, 12);
}

TEST(FailureReport, MalformedErrorFileIsReportedNotFatal) {
  std::string path = TempFile("bad.json", "{not json");
  auto f = DescribeFailure(0, 0, 1, ExitStatus{1, 0}, path, "h", 5);
  EXPECT_NE(f.message.find("could not be parsed"), std::string::npos) << f.message;
  EXPECT_EQ(f.exitcode, 1);
}

TEST(FailureReport, SummaryMatchesTorchrunLayout) {
  auto f = DescribeFailure(1, 1, 23004, ExitStatus{3, 0}, "", "localhost", 1795238258);
  std::string s = FormatFailureSummary("exit3.py", {f});
  std::string expected =
      "\n============================================================\n"
      "exit3.py FAILED\n"
      "------------------------------------------------------------\n"
      "Failures:\n"
      "  <NO_OTHER_FAILURES>\n"
      "------------------------------------------------------------\n"
      "Root Cause (first observed failure):\n"
      "[0]:\n"
      "  time      : " +
      IsoTimestamp(1795238258) +
      "\n"
      "  host      : localhost\n"
      "  rank      : 1 (local_rank: 1)\n"
      "  exitcode  : 3 (pid: 23004)\n"
      "  error_file: <N/A>\n"
      "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n"
      "============================================================";
  EXPECT_EQ(s, expected);
}

TEST(FailureReport, RootCauseIsEarliestAndOthersListed) {
  auto a = DescribeFailure(0, 0, 1, ExitStatus{1, 0}, "", "h", 20);
  auto b = DescribeFailure(1, 1, 2, ExitStatus{0, SIGSEGV}, "", "h", 10);
  auto c = DescribeFailure(2, 2, 3, ExitStatus{1, 0}, "", "h", 10);
  EXPECT_EQ(RootCauseIndex({a, b, c}), 1u);
  std::string s = FormatFailureSummary("t.py", {a, b, c});
  auto root_pos = s.find("Root Cause");
  EXPECT_NE(s.find("rank      : 0 (local_rank: 0)"), std::string::npos);
  EXPECT_LT(s.find("rank      : 0 (local_rank: 0)"), root_pos);
  EXPECT_GT(s.find("Signal 11 (SIGSEGV)"), root_pos);
  EXPECT_EQ(s.find("NO_OTHER_FAILURES"), std::string::npos);
  // Border width: the longest line, capped at 60.
  EXPECT_NE(s.find("\n" + std::string(60, '=') + "\n"), std::string::npos);
}

TEST(FailureReport, NarrowSummary) {
  WorkerFailure f;
  f.message = "x";
  f.host = "h";
  f.error_file = "<N/A>";
  std::string s = FormatFailureSummary("a.py", {f});
  // "  time      : YYYY-MM-DD_HH:MM:SS" (33 characters) is the widest line here.
  EXPECT_EQ(s.substr(0, 35), "\n" + std::string(33, '=') + "\n");
}

TEST(FailureReport, AgentErrorFileGetsErrorCode) {
  std::string child = TempFile(
      "child.json",
      R"({"message": {"message": "E: x", "extraInfo": {"py_callstack": "tb", "timestamp": "5"}}})");
  auto f = DescribeFailure(0, 0, 1, ExitStatus{0, SIGKILL}, child, "h", 5);
  std::string parent = (std::filesystem::temp_directory_path() / "ftrun_fr_parent.json").string();
  ASSERT_TRUE(WriteAgentErrorFile(parent, f));
  std::ifstream in(parent);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"errorCode\":-9"), std::string::npos) << text;
  EXPECT_NE(text.find("\"py_callstack\":\"tb\""), std::string::npos) << text;
}

}  // namespace
}  // namespace ftrun::launcher
