#include "common/json_message.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

namespace ftrun {

namespace pb = google::protobuf;

JsonMessage::JsonMessage(const std::string& type, const char* type_key)
    : s_(std::make_unique<pb::Struct>()) {
  Set(type_key, type);
}
std::optional<JsonMessage> JsonMessage::Parse(const std::string& json) {
  JsonMessage m("", "");
  m.s_->Clear();
  if (!pb::util::JsonStringToMessage(json, m.s_.get()).ok()) return std::nullopt;
  return m;
}

JsonMessage::~JsonMessage() = default;
JsonMessage::JsonMessage(JsonMessage&&) noexcept = default;
JsonMessage::JsonMessage(const JsonMessage& other) : s_(std::make_unique<pb::Struct>(*other.s_)) {}

JsonMessage& JsonMessage::Set(const std::string& key, const std::string& value) {
  (*s_->mutable_fields())[key].set_string_value(value);
  return *this;
}
JsonMessage& JsonMessage::Set(const std::string& key, int64_t value) {
  (*s_->mutable_fields())[key].set_number_value(static_cast<double>(value));
  return *this;
}
JsonMessage& JsonMessage::Set(const std::string& key, double value) {
  (*s_->mutable_fields())[key].set_number_value(value);
  return *this;
}
JsonMessage& JsonMessage::Set(const std::string& key, bool value) {
  (*s_->mutable_fields())[key].set_bool_value(value);
  return *this;
}
JsonMessage& JsonMessage::Set(const std::string& key, const std::vector<std::string>& values) {
  auto* list = (*s_->mutable_fields())[key].mutable_list_value();
  list->clear_values();
  for (const auto& v : values) list->add_values()->set_string_value(v);
  return *this;
}
namespace {
template <typename Number>
void SetNumbers(google::protobuf::Struct& s, const std::string& key,
                const std::vector<Number>& values) {
  auto* list = (*s.mutable_fields())[key].mutable_list_value();
  list->clear_values();
  for (Number v : values) list->add_values()->set_number_value(static_cast<double>(v));
}
}  // namespace

JsonMessage& JsonMessage::Set(const std::string& key, const std::vector<int>& values) {
  SetNumbers(*s_, key, values);
  return *this;
}
JsonMessage& JsonMessage::Set(const std::string& key, const std::vector<int64_t>& values) {
  SetNumbers(*s_, key, values);
  return *this;
}
JsonMessage& JsonMessage::Set(const std::string& key, const JsonMessage& object) {
  *(*s_->mutable_fields())[key].mutable_struct_value() = *object.s_;
  return *this;
}
JsonMessage& JsonMessage::Append(const std::string& key, const JsonMessage& object) {
  *(*s_->mutable_fields())[key].mutable_list_value()->add_values()->mutable_struct_value() =
      *object.s_;
  return *this;
}

std::string JsonMessage::str() const {
  std::string out;
  (void)pb::util::MessageToJsonString(*s_, &out);
  return out;
}

}  // namespace ftrun
