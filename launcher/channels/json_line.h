// ParseJsonLine: one line of a JSON-lines channel read into its typed message (a protobuf
// message whose schema is the line's, e.g. proto/ftrun/v1/control.proto) by protobuf's JSON
// parser. Unknown members are ignored. Stricter than protobuf's JSON mapping, as the control
// channel has always been: a known member's JSON kind must be its type's (a bool is true or
// false, an integer a number without a fraction, a string a string; never null).
//
// A line nested deeper than kMaxJsonDepth (arrays and objects) is refused by Boost.JSON's depth
// limit, which stops there, and never reaches protobuf's parser: that one takes time quadratic
// in the depth (a 60 KB line 30,000 levels deep took about 20 s), and the channel's messages
// are flat.
//
// The line is parsed once, by Boost.JSON, into an object; a message whose members are all
// scalars (every line ftrun's worker helper sends) is then filled from it through reflection,
// without parsing the text again (a progress report and a flash-checkpoint commit arrive every
// step; protobuf's JSON parser, which read them before, took most of the agent's time per
// every-step save). Anything the object cannot give exactly as protobuf's typed parser would (a
// fraction, an integer beyond int64 or a non-integral double beyond 2^53, a repeated or nested
// member, a member named both ways) goes through that parser, so both paths accept and refuse
// the same lines.
//
// Errors name the culprit as the control channel reports it: "not a JSON object", or the
// first member (in the schema's order) whose value does not fit, e.g. "'step' must be an
// integer". Thread: any; no state.
#pragma once

#include <google/protobuf/message.h>

#include <boost/json/object.hpp>
#include <string>

#include "common/result.h"

namespace ftrun::launcher {

inline constexpr int kMaxJsonDepth = 32;

// One line read once as a JSON object, then as many typed messages as the caller needs (the
// envelope, then the message its type selects) without parsing the text again into a tree.
class JsonLine {
 public:
  // "not a JSON object" when `line` is not one; "JSON nested deeper than 32 levels" when it
  // is too deep (Boost.JSON stops at the first level beyond kMaxJsonDepth).
  static Result<JsonLine> Read(std::string line);
  // Clears `msg`, then fills it from the line.
  Status Into(google::protobuf::Message* msg) const;

 private:
  // Whether every member of `msg` the line names was set from object_ (false: the parser must).
  bool IntoFromObject(google::protobuf::Message* msg) const;
  Status IntoParsed(google::protobuf::Message* msg) const;

  std::string text_;
  boost::json::object object_;
};

// JsonLine::Read(line), then Into(msg).
Status ParseJsonLine(const std::string& line, google::protobuf::Message* msg);

}  // namespace ftrun::launcher
