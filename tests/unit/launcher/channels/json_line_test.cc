#include "launcher/channels/json_line.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "ftrun/v1/control.pb.h"

namespace ftrun::launcher {
namespace {

// The reason ParseJsonLine gives for `line` read as a saved message ("" when it fits).
std::string SavedError(const std::string& line, v1::ControlSaved* saved) {
  auto parsed = ParseJsonLine(line, saved);
  return parsed ? "" : parsed.error().message;
}

TEST(JsonLineTest, ReadsTheTypedMessageAndIgnoresUnknownMembers) {
  v1::ControlSaved saved;
  ASSERT_EQ(SavedError(R"({"type":"saved","id":3,"ok":false,"error":"disk full",)"
                       R"("extra":{"nested":[1,"x",null]},"more":1.5,"none":null})",
                       &saved),
            "");
  EXPECT_TRUE(saved.has_id());
  EXPECT_EQ(saved.id(), 3);
  EXPECT_TRUE(saved.has_ok());
  EXPECT_FALSE(saved.ok());
  EXPECT_FALSE(saved.finalize());
  EXPECT_EQ(saved.error(), "disk full");
}

TEST(JsonLineTest, AbsentMembersStayAbsentAndEachParseStartsAfresh) {
  v1::ControlSaved saved;
  ASSERT_EQ(SavedError(R"({"type":"saved","id":3,"ok":true})", &saved), "");
  ASSERT_EQ(SavedError(R"({"type":"saved","finalize":true})", &saved), "");
  EXPECT_FALSE(saved.has_id());
  EXPECT_FALSE(saved.has_ok());
  EXPECT_TRUE(saved.finalize());
}

TEST(JsonLineTest, IntegersAreNumbersWithoutAFraction) {
  v1::ControlProgress progress;
  for (const char* line : {R"({"step":41})", R"({"step":41.0})", R"({"step":4.1e1})"}) {
    auto parsed = ParseJsonLine(line, &progress);
    ASSERT_TRUE(parsed) << line << ": " << parsed.error().message;
    EXPECT_EQ(progress.step(), 41) << line;
  }
}

TEST(JsonLineTest, AMemberOfTheWrongTypeIsNamed) {
  struct Case {
    const char* line;
    const char* error;
  };
  v1::ControlSaved saved;
  for (const Case& c : {
           Case{R"({"id":"three","ok":true})", "'id' must be an integer"},
           Case{R"({"id":1.5,"ok":true})", "'id' must be an integer"},
           Case{R"({"id":"3","ok":true})", "'id' must be an integer"},
           Case{R"({"id":null,"ok":true})", "'id' must be an integer"},
           Case{R"({"id":3,"ok":"yes"})", "'ok' must be true or false"},
           Case{R"({"id":3,"ok":"true"})", "'ok' must be true or false"},
           Case{R"({"id":3,"ok":1})", "'ok' must be true or false"},
           Case{R"({"id":3,"ok":null})", "'ok' must be true or false"},
           Case{R"({"id":3,"ok":true,"error":7})", "'error' must be a string"},
           Case{R"({"id":3,"ok":true,"finalize":{}})", "'finalize' must be true or false"},
           // The first culprit in the schema's order.
           Case{R"({"error":7,"id":"x"})", "'id' must be an integer"},
       }) {
    EXPECT_EQ(SavedError(c.line, &saved), c.error) << c.line;
  }
}

TEST(JsonLineTest, WhatIsNotAJsonObjectIsSaidSo) {
  v1::ControlEnvelope envelope;
  for (const char* line : {"not json", "[1,2]", "5", R"({"type":"x")", ""}) {
    auto parsed = ParseJsonLine(line, &envelope);
    ASSERT_FALSE(parsed) << line;
    EXPECT_EQ(parsed.error().message, "not a JSON object") << line;
  }
  auto parsed = ParseJsonLine(R"({"type":5})", &envelope);
  ASSERT_FALSE(parsed);
  EXPECT_EQ(parsed.error().message, "'type' must be a string");
}

// A 60 KB line 30,000 levels deep took protobuf's parser about 20 s (issue 17): Boost.JSON's depth
// limit refuses it (linearly) before protobuf parses it, while the allowed depth (brackets in
// strings not counted) still parses.
TEST(JsonLineTest, DeepNestingIsRefusedBeforeParsing) {
  const std::string deep =
      R"({"type":"hello","x":)" + std::string(30000, '[') + std::string(30000, ']') + "}";
  const auto started = std::chrono::steady_clock::now();
  auto parsed = JsonLine::Read(deep);
  const auto took = std::chrono::steady_clock::now() - started;
  ASSERT_FALSE(parsed);
  EXPECT_EQ(parsed.error().message, "JSON nested deeper than 32 levels");
  EXPECT_LT(took, std::chrono::milliseconds(500));  // generous: it takes microseconds

  v1::ControlEnvelope envelope;
  const std::string allowed = R"({"type":"hello","x":)" + std::string(kMaxJsonDepth - 1, '[') +
                              std::string(kMaxJsonDepth - 1, ']') + "}";
  EXPECT_TRUE(ParseJsonLine(allowed, &envelope));
  EXPECT_EQ(envelope.type(), "hello");
  const std::string one_more = R"({"type":"hello","x":)" + std::string(kMaxJsonDepth, '[') +
                               std::string(kMaxJsonDepth, ']') + "}";
  EXPECT_FALSE(ParseJsonLine(one_more, &envelope));
  // Brackets inside strings (escaped quotes too) are text, not nesting.
  const std::string in_string =
      R"({"type":"hello","x":"\"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["})";
  EXPECT_TRUE(ParseJsonLine(in_string, &envelope));
}

// Flat lines (what the worker helper sends) are read by the scanner; the lines it leaves to
// protobuf's parser (escapes, non-ASCII, fractions, huge numbers, bad numbers) still read as
// before, and both paths take a member by its JSON name or its proto name.
TEST(JsonLineTest, FlatLinesAndTheirEdgesReadAsTheParserReadsThem) {
  v1::ControlSnapshotCommit commit;
  ASSERT_TRUE(ParseJsonLine(R"( { "type" : "snapshot_commit", "id":7,"step":-0,"worldSize":3,)"
                            R"("persist":true,"path":"/tmp/a b","answer":false,"x":null,)"
                            R"("y":1.5e-3,"z":[1]} )",
                            &commit));
  EXPECT_EQ(commit.id(), 7);
  EXPECT_TRUE(commit.has_step());
  EXPECT_EQ(commit.step(), 0);
  EXPECT_EQ(commit.world_size(), 3);
  EXPECT_TRUE(commit.persist());
  EXPECT_EQ(commit.path(), "/tmp/a b");
  EXPECT_TRUE(commit.has_answer());
  EXPECT_FALSE(commit.answer());
  EXPECT_FALSE(commit.has_begun());
  ASSERT_TRUE(ParseJsonLine(R"({"world_size":4,"step":9223372036854775807,"begun":0})", &commit));
  EXPECT_EQ(commit.world_size(), 4);
  EXPECT_EQ(commit.step(), INT64_MAX);
  EXPECT_TRUE(commit.has_begun());
  EXPECT_FALSE(commit.has_id());  // each read starts afresh
  ASSERT_TRUE(ParseJsonLine(R"({"step":-9223372036854775808})", &commit));
  EXPECT_EQ(commit.step(), INT64_MIN);
  EXPECT_FALSE(ParseJsonLine(R"({"step":9223372036854775808})", &commit));
  ASSERT_TRUE(ParseJsonLine(R"({"path":"a\"b\\c\u00e9","name":"\u00e9t\u00e9"})", &commit));
  EXPECT_EQ(commit.path(), "a\"b\\c\xc3\xa9");
  ASSERT_TRUE(ParseJsonLine("{\"name\":\"\xc3\xa9t\xc3\xa9\"}", &commit));
  EXPECT_EQ(commit.name(), "\u00e9t\u00e9");
  ASSERT_TRUE(ParseJsonLine(R"({"step":2e1})", &commit));
  EXPECT_EQ(commit.step(), 20);
  for (const char* bad : {R"({"step":01})", R"({"step":-})", R"({"step":1e})", R"({"step":.5})",
                          R"({"step" 1})", R"({"step":tru})", R"({"step":1}x)"}) {
    auto parsed = ParseJsonLine(bad, &commit);
    ASSERT_FALSE(parsed) << bad;
    EXPECT_EQ(parsed.error().message, "not a JSON object") << bad;
  }
}

}  // namespace
}  // namespace ftrun::launcher
