#include "launcher/channels/json_line.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <cstring>
#include <memory>
#include <string_view>

namespace ftrun::launcher {
namespace {

namespace pb = google::protobuf;

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

// Whether no array or object in `text` nests deeper than `limit` (brackets inside strings do
// not count). Linear, and stops at the first level too deep.
bool NestedWithin(const std::string& text, int limit) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

// The one-pass scanner of flat lines: true and the members when `text` is a JSON object whose
// members are all scalars, with strings of printable ASCII without escapes and no key twice;
// false for anything else (the parser then reads it).
class FlatScanner {
 public:
  explicit FlatScanner(const std::string& text) : s_(text) {}

  bool Scan(std::vector<JsonLine::Member>* members) {
    Space();
    if (!Eat('{')) return false;
    Space();
    if (Eat('}')) return End();
    while (true) {
      JsonLine::Member m;
      if (!String(&m.key_at, &m.key_size)) return false;
      for (const auto& other : *members) {
        if (other.key_size == m.key_size &&
            std::memcmp(s_.data() + other.key_at, s_.data() + m.key_at, m.key_size) == 0) {
          return false;
        }
      }
      Space();
      if (!Eat(':')) return false;
      Space();
      if (!Value(&m)) return false;
      members->push_back(m);
      Space();
      if (Eat('}')) return End();
      if (!Eat(',')) return false;
      Space();
    }
  }

 private:
  bool End() {
    Space();
    return i_ == s_.size();
  }
  void Space() {
    while (i_ < s_.size() &&
           (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\r' || s_[i_] == '\n')) {
      ++i_;
    }
  }
  bool Eat(char c) {
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  bool Word(const char* word) {
    const size_t n = std::strlen(word);
    if (s_.compare(i_, n, word) != 0) return false;
    i_ += n;
    return true;
  }
  bool String(size_t* at, size_t* size) {
    if (!Eat('"')) return false;
    *at = i_;
    while (i_ < s_.size()) {
      const auto c = static_cast<unsigned char>(s_[i_]);
      if (c == '"') {
        *size = i_ - *at;
        ++i_;
        return true;
      }
      if (c < 0x20 || c >= 0x7f || c == '\\') return false;  // the parser decodes those
      ++i_;
    }
    return false;
  }
  bool Value(JsonLine::Member* m) {
    if (i_ >= s_.size()) return false;
    const char c = s_[i_];
    if (c == '"') {
      m->kind = JsonLine::Member::kString;
      return String(&m->value_at, &m->value_size);
    }
    if (c == 't' || c == 'f') {
      m->kind = JsonLine::Member::kBool;
      m->boolean = c == 't';
      return Word(c == 't' ? "true" : "false");
    }
    if (c == 'n') {
      m->kind = JsonLine::Member::kOther;
      return Word("null");
    }
    return Number(m);
  }
  // An integer (-?(0|[1-9][0-9]*) within int64); a fraction or an exponent is kOther.
  bool Number(JsonLine::Member* m) {
    const bool negative = Eat('-');
    const size_t digits = i_;
    uint64_t value = 0;
    bool overflow = false;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
      const auto d = static_cast<uint64_t>(s_[i_] - '0');
      if (value > (UINT64_MAX - d) / 10) overflow = true;
      value = value * 10 + d;
      ++i_;
    }
    const size_t n = i_ - digits;
    if (n == 0 || (n > 1 && s_[digits] == '0')) return false;
    if (i_ < s_.size() && (s_[i_] == '.' || s_[i_] == 'e' || s_[i_] == 'E')) {
      // A valid number the parser may still take as an integer (41.0): kOther.
      if (Eat('.') && !Digits()) return false;
      if (Eat('e') || Eat('E')) {
        if (!Eat('+')) Eat('-');
        if (!Digits()) return false;
      }
      m->kind = JsonLine::Member::kOther;
      return true;
    }
    const uint64_t limit = negative ? uint64_t{1} << 63 : (uint64_t{1} << 63) - 1;
    if (overflow || value > limit) {
      m->kind = JsonLine::Member::kOther;
      return true;
    }
    m->kind = JsonLine::Member::kInteger;
    m->integer = negative ? static_cast<int64_t>(0 - value) : static_cast<int64_t>(value);
    return true;
  }

  bool Digits() {
    const size_t start = i_;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
    return i_ > start;
  }

  const std::string& s_;
  size_t i_ = 0;
};

}  // namespace

Result<JsonLine> JsonLine::Read(std::string line) {
  JsonLine json;
  if (FlatScanner(line).Scan(&json.members_)) {
    json.flat_ = true;
    json.text_ = std::move(line);
    return json;
  }
  json.members_.clear();
  if (!NestedWithin(line, kMaxJsonDepth)) {
    return Error{"JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels"};
  }
  if (!pb::util::JsonStringToMessage(line, &json.object_).ok()) return Error{"not a JSON object"};
  json.text_ = std::move(line);
  return json;
}

bool JsonLine::IntoFlat(pb::Message* msg) const {
  msg->Clear();
  const pb::Descriptor& schema = *msg->GetDescriptor();
  const pb::Reflection& reflection = *msg->GetReflection();
  uint64_t seen = 0;  // the schema's fields already set (a member named both ways is the parser's)
  for (const Member& m : members_) {
    const std::string_view key(text_.data() + m.key_at, m.key_size);
    const pb::FieldDescriptor* field = nullptr;
    int index = 0;
    for (; index < schema.field_count(); ++index) {
      const pb::FieldDescriptor* f = schema.field(index);
      if (f->json_name() == key || f->name() == key) {
        field = f;
        break;
      }
    }
    if (field == nullptr) continue;  // unknown: ignored, as the parser ignores it
    if (field->is_repeated() || index >= 64 || (seen & (uint64_t{1} << index))) return false;
    seen |= uint64_t{1} << index;
    switch (field->type()) {
      case pb::FieldDescriptor::TYPE_INT64:
        if (m.kind != Member::kInteger) return false;
        reflection.SetInt64(msg, field, m.integer);
        break;
      case pb::FieldDescriptor::TYPE_BOOL:
        if (m.kind != Member::kBool) return false;
        reflection.SetBool(msg, field, m.boolean);
        break;
      case pb::FieldDescriptor::TYPE_STRING:
        if (m.kind != Member::kString) return false;
        reflection.SetString(msg, field, text_.substr(m.value_at, m.value_size));
        break;
      default:
        return false;
    }
  }
  return true;
}

Status JsonLine::Into(pb::Message* msg) const {
  if (!flat_) return IntoParsed(msg, object_);
  if (IntoFlat(msg)) return {};
  // What the scanner cannot set exactly as protobuf's parser would: the parser decides.
  pb::Struct object;
  if (!pb::util::JsonStringToMessage(text_, &object).ok()) return Error{"not a JSON object"};
  return IntoParsed(msg, object);
}

Status JsonLine::IntoParsed(pb::Message* msg, const pb::Struct& object) const {
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
