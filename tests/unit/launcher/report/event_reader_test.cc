// ReadEventLog on real files: what a live or damaged event log holds is skipped and counted.
#include "launcher/report/event_reader.h"

#include <gtest/gtest.h>

#include <fstream>

#include "tests/support/test_support.h"

namespace ftrun::launcher::report {
namespace {

using ftrun::testing::TempDir;

const char* kRecord =
    R"({"schema":1,"event":"workers_spawned","time":"2026-11-26T01:27:52.232Z","node":"n0",)"
    R"("run_id":"job","round":3,"ranks":[0,1],"attempt":2})";

TEST(ReportEventReader, ReadsRecordsAndFlattensTheirFields) {
  auto r = ParseEventLine(kRecord, nullptr);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->event, "workers_spawned");
  EXPECT_EQ(r->time_ms, 1795656472232);
  EXPECT_EQ(r->node, "n0");
  EXPECT_EQ(r->round, 3);
  EXPECT_EQ(r->Text("ranks"), "0,1");
  EXPECT_EQ(r->Int("attempt"), 2);
  EXPECT_EQ(r->Text("run_id"), "job");
  EXPECT_FALSE(r->Int("ranks"));
}

TEST(ReportEventReader, ParsesTheLogsTimes) {
  EXPECT_EQ(ParseIsoTimeMs("1970-01-01T00:00:01.5Z"), 1500);
  EXPECT_EQ(ParseIsoTimeMs("1970-01-01T00:00:01Z"), 1000);
  EXPECT_FALSE(ParseIsoTimeMs("yesterday"));
  EXPECT_FALSE(ParseIsoTimeMs("1970-01-01T00:00:01.5+02:00"));
}

TEST(ReportEventReader, SkipsAndCountsWhatIsNotARecord) {
  TempDir dir;
  const std::string path = dir / "events.jsonl";
  {
    std::ofstream f(path);
    f << kRecord << "\n";
    f << "not json at all\n";
    f << R"({"no":"event"})"
      << "\n";
    f << std::string(kMaxRecordBytes + 10, 'x') << "\n";
    f << R"({"schema":7,"event":"x","time":"2026-11-26T01:27:52.232Z"})"
      << "\n";
    f << std::string(100, '[') << "\n";  // too deep to be worth parsing
    f << kRecord << "\n";
    f << R"({"schema":1,"event":"half)";  // still being written
  }
  auto read = ReadEventLog(path);
  ASSERT_TRUE(read) << read.error().message;
  EXPECT_EQ(read->records.size(), 2u);
  EXPECT_EQ(read->not_json, 3u);
  EXPECT_EQ(read->too_long, 1u);
  EXPECT_EQ(read->other_schema, 1u);
  EXPECT_EQ(read->other_schema_seen, 7);
  EXPECT_TRUE(read->partial_last_line);
  EXPECT_FALSE(read->cut_off);
}

TEST(ReportEventReader, AMissingFileIsAnErrorNamingIt) {
  auto read = ReadEventLog("/nonexistent/events.jsonl");
  ASSERT_FALSE(read);
  EXPECT_NE(read.error().message.find("/nonexistent/events.jsonl"), std::string::npos);
}

}  // namespace
}  // namespace ftrun::launcher::report
