// ParseJsonLine: one line of a JSON-lines channel read into its typed message (a protobuf
// message whose schema is the line's, e.g. proto/ftrun/v1/control.proto) by protobuf's JSON
// parser. Unknown members are ignored. Stricter than protobuf's JSON mapping, as the control
// channel has always been: a known member's JSON kind must be its type's (a bool is true or
// false, an integer a number without a fraction, a string a string; never null).
//
// A line nested deeper than kMaxJsonDepth (arrays and objects) is refused before it is parsed:
// protobuf's parser takes time quadratic in the depth (a 60 KB line 30,000 levels deep took
// about 20 s), and the channel's messages are flat.
//
// A flat line (scalar members only, ASCII strings without escapes, integers written as such:
// every line ftrun's worker helper sends) is read by a one-pass scanner and set through
// reflection, without protobuf's JSON parser (about 20 us a line, paid on every progress
// report and every flash-checkpoint commit); any other line, and any flat one whose known
// members the scanner cannot set exactly as protobuf's parser would (a fraction, null, a
// member named twice), goes through that parser, so both paths accept and refuse the same.
//
// Errors name the culprit as the control channel reports it: "not a JSON object", or the
// first member (in the schema's order) whose value does not fit, e.g. "'step' must be an
// integer". Thread: any; no state.
#pragma once

#include <google/protobuf/struct.pb.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"

namespace ftrun::launcher {

inline constexpr int kMaxJsonDepth = 32;

// One line read once as a JSON object, then as many typed messages as the caller needs (the
// envelope, then the message its type selects) without parsing the text again into a tree.
class JsonLine {
 public:
  // "not a JSON object" when `line` is not one; "JSON nested deeper than 32 levels" when it
  // is too deep to be parsed (a cheap scan, before any parsing).
  static Result<JsonLine> Read(std::string line);
  // Clears `msg`, then fills it from the line.
  Status Into(google::protobuf::Message* msg) const;

  // A member of a flat line, as the scanner read it (key and string: offsets into text_).
  struct Member {
    enum Kind { kInteger, kBool, kString, kOther } kind = kOther;
    size_t key_at = 0, key_size = 0;
    size_t value_at = 0, value_size = 0;  // kString
    int64_t integer = 0;
    bool boolean = false;
  };

 private:
  // Whether the scanner set every member of `msg` the line names (false: the parser must).
  bool IntoFlat(google::protobuf::Message* msg) const;
  Status IntoParsed(google::protobuf::Message* msg, const google::protobuf::Struct& object) const;

  std::string text_;
  bool flat_ = false;
  std::vector<Member> members_;      // when flat_
  google::protobuf::Struct object_;  // when not flat_
};

// JsonLine::Read(line), then Into(msg).
Status ParseJsonLine(const std::string& line, google::protobuf::Message* msg);

}  // namespace ftrun::launcher
