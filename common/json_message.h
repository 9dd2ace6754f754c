// JsonMessage: one JSON object built field by field and printed on one line by protobuf's
// JSON printer (the control protocol's messages, the event log's records).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace google::protobuf {
class Struct;
class Value;
}  // namespace google::protobuf

namespace ftrun {

class JsonMessage {
 public:
  explicit JsonMessage(const std::string& type, const char* type_key = "type");
  // A JSON object read back from its text (e.g. received from the server); nullopt when the
  // text is not a JSON object.
  static std::optional<JsonMessage> Parse(const std::string& json);
  ~JsonMessage();
  JsonMessage(JsonMessage&&) noexcept;
  JsonMessage(const JsonMessage& other);
  JsonMessage& Set(const std::string& key, const std::string& value);
  JsonMessage& Set(const std::string& key, const char* value) {
    return Set(key, std::string(value));
  }
  JsonMessage& Set(const std::string& key, int64_t value);
  JsonMessage& Set(const std::string& key, int value) { return Set(key, int64_t{value}); }
  JsonMessage& Set(const std::string& key, uint64_t value) {
    return Set(key, static_cast<int64_t>(value));
  }
  JsonMessage& Set(const std::string& key, double value);
  JsonMessage& Set(const std::string& key, bool value);
  JsonMessage& Set(const std::string& key, const std::vector<std::string>& values);
  JsonMessage& Set(const std::string& key, const std::vector<int>& values);
  JsonMessage& Set(const std::string& key, const std::vector<int64_t>& values);
  // A nested object.
  JsonMessage& Set(const std::string& key, const JsonMessage& object);
  JsonMessage& Append(const std::string& key, const JsonMessage& object);  // to a list
  std::string str() const;

 private:
  std::unique_ptr<google::protobuf::Struct> s_;
};

}  // namespace ftrun
