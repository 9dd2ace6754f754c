#include "launcher/channels/json_line.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <boost/json/parse.hpp>
#include <boost/json/src.hpp>  // Boost.JSON header-only: compiled in this one file
#include <cmath>
#include <limits>
#include <memory>

namespace ftrun::launcher {
namespace {

namespace pb = google::protobuf;

// 2^53: every integer up to it is exact in a double (a JSON number as protobuf's Struct holds
// it).
constexpr double kExactInDouble = 9007199254740992.0;

pb::util::JsonParseOptions Options() {
  pb::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  return options;
}

std::string Expected(const pb::FieldDescriptor& field) {
  switch (field.cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_BOOL:
      return "true or false";
    case pb::FieldDescriptor::CPPTYPE_STRING:
      return "a string";
    case pb::FieldDescriptor::CPPTYPE_INT32:
    case pb::FieldDescriptor::CPPTYPE_INT64:
    case pb::FieldDescriptor::CPPTYPE_UINT32:
    case pb::FieldDescriptor::CPPTYPE_UINT64:
      return "an integer";
    default:
      return "of type " + std::string(field.type_name());
  }
}

// Whether the JSON kind of `value` is that of `field`: protobuf's JSON parser (3.21) would
// also take "yes" for a bool, "12" for an integer and null for anything.
bool KindFits(const pb::FieldDescriptor& field, const pb::Value& value) {
  switch (field.cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_BOOL:
      return value.has_bool_value();
    case pb::FieldDescriptor::CPPTYPE_STRING:
      return value.has_string_value();
    case pb::FieldDescriptor::CPPTYPE_INT32:
    case pb::FieldDescriptor::CPPTYPE_INT64:
    case pb::FieldDescriptor::CPPTYPE_UINT32:
    case pb::FieldDescriptor::CPPTYPE_UINT64:
      return value.has_number_value();
    default:
      return true;  // left to protobuf's parser
  }
}

// Whether `{"<key>": value}` alone parses as a `prototype`: the parser's status does not say
// which member it refused (e.g. 1.5 for an integer).
bool ParsesAlone(const std::string& key, const pb::Value& value, const pb::Message& prototype) {
  pb::Struct alone;
  (*alone.mutable_fields())[key] = value;
  std::string json;
  std::unique_ptr<pb::Message> probe(prototype.New());
  return pb::util::MessageToJsonString(alone, &json).ok() &&
         pb::util::JsonStringToMessage(json, probe.get(), Options()).ok();
}

}  // namespace

Result<JsonLine> JsonLine::Read(std::string line) {
  // Boost.JSON stops at the first level too deep (linear), so the line that protobuf's parser
  // would take quadratic time over never reaches it.
  boost::json::parse_options options;
  options.max_depth = kMaxJsonDepth;
  boost::system::error_code ec;
  boost::json::value value = boost::json::parse(line, ec, {}, options);
  if (ec == boost::json::error::too_deep) {
    return Error{"JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels"};
  }
  if (ec || !value.is_object()) return Error{"not a JSON object"};
  JsonLine json;
  json.object_ = std::move(value.as_object());
  json.text_ = std::move(line);
  return json;
}

bool JsonLine::IntoFromObject(pb::Message* msg) const {
  msg->Clear();
  const pb::Descriptor& schema = *msg->GetDescriptor();
  const pb::Reflection& reflection = *msg->GetReflection();
  for (int i = 0; i < schema.field_count(); ++i) {
    const pb::FieldDescriptor* field = schema.field(i);
    const boost::json::value* value = object_.if_contains(field->json_name());
    if (field->json_name() != field->name()) {
      const boost::json::value* by_name = object_.if_contains(field->name());
      if (value != nullptr && by_name != nullptr) return false;  // named both ways
      if (value == nullptr) value = by_name;
    }
    if (value == nullptr) continue;
    if (field->is_repeated()) return false;
    switch (field->type()) {
      case pb::FieldDescriptor::TYPE_INT64: {
        int64_t number = 0;
        if (value->is_int64()) {
          number = value->get_int64();
        } else if (value->is_double()) {
          // Exact only within a double's integers; anything else is the parser's to judge.
          const double d = value->get_double();
          if (d != std::trunc(d) || std::fabs(d) > kExactInDouble) return false;
          number = static_cast<int64_t>(d);
        } else {
          return false;  // above INT64_MAX, or not a number: the parser says why
        }
        reflection.SetInt64(msg, field, number);
        break;
      }
      case pb::FieldDescriptor::TYPE_BOOL:
        if (!value->is_bool()) return false;
        reflection.SetBool(msg, field, value->get_bool());
        break;
      case pb::FieldDescriptor::TYPE_STRING:
        if (!value->is_string()) return false;
        reflection.SetString(msg, field, std::string(value->get_string()));
        break;
      default:
        return false;
    }
  }
  return true;
}

Status JsonLine::Into(pb::Message* msg) const {
  if (IntoFromObject(msg)) return {};
  return IntoParsed(msg);
}

Status JsonLine::IntoParsed(pb::Message* msg) const {
  // Protobuf's view of the line (rare: a line the reflection above could not take), to name
  // the member that does not fit as its parser judges it.
  pb::Struct object;
  if (!pb::util::JsonStringToMessage(text_, &object).ok()) return Error{"not a JSON object"};
  msg->Clear();
  const auto status = pb::util::JsonStringToMessage(text_, msg, Options());
  const pb::Descriptor& schema = *msg->GetDescriptor();
  for (int i = 0; i < schema.field_count(); ++i) {
    const pb::FieldDescriptor& field = *schema.field(i);
    auto it = object.fields().find(field.json_name());
    if (it == object.fields().end()) it = object.fields().find(field.name());
    if (it == object.fields().end()) continue;
    if (!KindFits(field, it->second) ||
        (!status.ok() && !ParsesAlone(it->first, it->second, *msg))) {
      return Error{"'" + it->first + "' must be " + Expected(field)};
    }
  }
  if (!status.ok()) {
    return Error{"not a valid '" + schema.name() + "': " + std::string(status.message())};
  }
  return {};
}

Status ParseJsonLine(const std::string& line, pb::Message* msg) {
  auto json = JsonLine::Read(line);
  if (!json) return json.error();
  return json->Into(msg);
}

}  // namespace ftrun::launcher
