// A small JSON value with a writer and a parser: enough for ps-bench's reports and for tests
// that read them back.
//
//   JsonValue result = JsonValue::Object();
//   result.Set("op", "push").Set("p50_us", 12.5);
//   std::string text = result.Serialize();
//   absl::StatusOr<JsonValue> back = ParseJson(text);
//
// Numbers are doubles (integers up to 2^53 are exact); NaN and infinities are written as null.
#ifndef HETPS_BENCH_JSON_H_
#define HETPS_BENCH_JSON_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace hetps::bench {

class JsonValue {
 public:
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };

  JsonValue() = default;
  JsonValue(bool value) : type_(Type::kBool), bool_(value) {}          // NOLINT: implicit by design
  JsonValue(double value) : type_(Type::kNumber), number_(value) {}    // NOLINT
  JsonValue(int value) : JsonValue(static_cast<double>(value)) {}      // NOLINT
  JsonValue(int64_t value) : JsonValue(static_cast<double>(value)) {}  // NOLINT
  JsonValue(uint64_t value) : JsonValue(static_cast<double>(value)) {}               // NOLINT
  JsonValue(std::string value) : type_(Type::kString), string_(std::move(value)) {}  // NOLINT
  JsonValue(const char* value) : JsonValue(std::string(value)) {}                    // NOLINT
  static JsonValue Array();
  static JsonValue Object();

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool as_bool() const { return bool_; }
  double as_number() const { return number_; }
  const std::string& as_string() const { return string_; }
  const std::vector<JsonValue>& items() const { return items_; }
  const std::vector<std::pair<std::string, JsonValue>>& members() const { return members_; }

  // Arrays.
  JsonValue& Append(JsonValue value);
  // Objects: sets `key` (replacing an earlier value) and returns *this for chaining.
  JsonValue& Set(const std::string& key, JsonValue value);
  // The member `key`, or null if there is none.
  const JsonValue* Find(absl::string_view key) const;

  std::string Serialize() const;

 private:
  void SerializeTo(std::string& out, int depth) const;

  Type type_ = Type::kNull;
  bool bool_ = false;
  double number_ = 0;
  std::string string_;
  std::vector<JsonValue> items_;
  std::vector<std::pair<std::string, JsonValue>> members_;
};

// InvalidArgument, with the offset, for text that is not one JSON value.
absl::StatusOr<JsonValue> ParseJson(absl::string_view text);

}  // namespace hetps::bench

#endif  // HETPS_BENCH_JSON_H_
