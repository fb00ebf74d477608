#include "bench/json.h"

#include <cmath>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace hetps::bench {

JsonValue JsonValue::Array() {
  JsonValue value;
  value.type_ = Type::kArray;
  return value;
}

JsonValue JsonValue::Object() {
  JsonValue value;
  value.type_ = Type::kObject;
  return value;
}

JsonValue& JsonValue::Append(JsonValue value) {
  items_.push_back(std::move(value));
  return *this;
}

JsonValue& JsonValue::Set(const std::string& key, JsonValue value) {
  for (auto& [name, existing] : members_) {
    if (name == key) {
      existing = std::move(value);
      return *this;
    }
  }
  members_.emplace_back(key, std::move(value));
  return *this;
}

const JsonValue* JsonValue::Find(absl::string_view key) const {
  for (const auto& [name, value] : members_) {
    if (name == key) return &value;
  }
  return nullptr;
}

namespace {

void AppendString(std::string& out, const std::string& value) {
  out += '"';
  for (unsigned char c : value) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          absl::StrAppendFormat(&out, "\\u%04x", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

void AppendNumber(std::string& out, double value) {
  if (!std::isfinite(value)) {
    out += "null";
  } else if (value == std::floor(value) && std::abs(value) < 9007199254740992.0) {
    absl::StrAppend(&out, static_cast<int64_t>(value));
  } else {
    absl::StrAppendFormat(&out, "%.17g", value);
  }
}

}  // namespace

void JsonValue::SerializeTo(std::string& out, int depth) const {
  const std::string indent(2 * (depth + 1), ' ');
  const std::string closing(2 * depth, ' ');
  switch (type_) {
    case Type::kNull:
      out += "null";
      return;
    case Type::kBool:
      out += bool_ ? "true" : "false";
      return;
    case Type::kNumber:
      AppendNumber(out, number_);
      return;
    case Type::kString:
      AppendString(out, string_);
      return;
    case Type::kArray:
      if (items_.empty()) {
        out += "[]";
        return;
      }
      out += "[\n";
      for (size_t i = 0; i < items_.size(); ++i) {
        out += indent;
        items_[i].SerializeTo(out, depth + 1);
        out += i + 1 < items_.size() ? ",\n" : "\n";
      }
      out += closing + "]";
      return;
    case Type::kObject:
      if (members_.empty()) {
        out += "{}";
        return;
      }
      out += "{\n";
      for (size_t i = 0; i < members_.size(); ++i) {
        out += indent;
        AppendString(out, members_[i].first);
        out += ": ";
        members_[i].second.SerializeTo(out, depth + 1);
        out += i + 1 < members_.size() ? ",\n" : "\n";
      }
      out += closing + "}";
      return;
  }
}

std::string JsonValue::Serialize() const {
  std::string out;
  SerializeTo(out, 0);
  out += '\n';
  return out;
}

namespace {

class Parser {
 public:
  explicit Parser(absl::string_view text) : text_(text) {}

  absl::StatusOr<JsonValue> ParseDocument() {
    absl::StatusOr<JsonValue> value = ParseValue(0);
    if (!value.ok()) return value;
    SkipSpace();
    if (pos_ != text_.size()) return Error("text after the value");
    return value;
  }

 private:
  static constexpr int kMaxDepth = 64;

  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("bad JSON at offset ", pos_, ": ", what));
  }

  void SkipSpace() {
    while (pos_ < text_.size() && absl::ascii_isspace(static_cast<unsigned char>(text_[pos_]))) {
      ++pos_;
    }
  }

  bool Consume(absl::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  absl::StatusOr<JsonValue> ParseValue(int depth) {
    if (depth > kMaxDepth) return Error("nested too deeply");
    SkipSpace();
    if (pos_ >= text_.size()) return Error("unexpected end");
    const char c = text_[pos_];
    if (c == '{') return ParseObject(depth);
    if (c == '[') return ParseArray(depth);
    if (c == '"') {
      absl::StatusOr<std::string> s = ParseString();
      if (!s.ok()) return s.status();
      return JsonValue(*std::move(s));
    }
    if (Consume("true")) return JsonValue(true);
    if (Consume("false")) return JsonValue(false);
    if (Consume("null")) return JsonValue();
    return ParseNumber();
  }

  absl::StatusOr<JsonValue> ParseNumber() {
    const std::string rest(text_.substr(pos_, 64));
    char* end = nullptr;
    const double value = std::strtod(rest.c_str(), &end);
    if (end == rest.c_str()) return Error("expected a value");
    pos_ += static_cast<size_t>(end - rest.c_str());
    return JsonValue(value);
  }

  absl::StatusOr<std::string> ParseString() {
    ++pos_;  // opening quote
    std::string out;
    while (pos_ < text_.size()) {
      const char c = text_[pos_++];
      if (c == '"') return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= text_.size()) break;
      const char escaped = text_[pos_++];
      switch (escaped) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'u': {
          if (pos_ + 4 > text_.size()) return Error("short \\u escape");
          const unsigned code = static_cast<unsigned>(
              std::strtoul(std::string(text_.substr(pos_, 4)).c_str(), nullptr, 16));
          pos_ += 4;
          if (code >= 0x80) return Error("only ASCII \\u escapes are supported");
          out += static_cast<char>(code);
          break;
        }
        default:
          out += escaped;  // \" \\ \/
      }
    }
    return Error("unterminated string");
  }

  absl::StatusOr<JsonValue> ParseArray(int depth) {
    ++pos_;
    JsonValue array = JsonValue::Array();
    SkipSpace();
    if (Consume("]")) return array;
    while (true) {
      absl::StatusOr<JsonValue> item = ParseValue(depth + 1);
      if (!item.ok()) return item;
      array.Append(*std::move(item));
      SkipSpace();
      if (Consume("]")) return array;
      if (!Consume(",")) return Error("expected ',' or ']'");
    }
  }

  absl::StatusOr<JsonValue> ParseObject(int depth) {
    ++pos_;
    JsonValue object = JsonValue::Object();
    SkipSpace();
    if (Consume("}")) return object;
    while (true) {
      SkipSpace();
      if (pos_ >= text_.size() || text_[pos_] != '"') return Error("expected a key");
      absl::StatusOr<std::string> key = ParseString();
      if (!key.ok()) return key.status();
      SkipSpace();
      if (!Consume(":")) return Error("expected ':'");
      absl::StatusOr<JsonValue> value = ParseValue(depth + 1);
      if (!value.ok()) return value;
      object.Set(*key, *std::move(value));
      SkipSpace();
      if (Consume("}")) return object;
      if (!Consume(",")) return Error("expected ',' or '}'");
    }
  }

  absl::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

absl::StatusOr<JsonValue> ParseJson(absl::string_view text) { return Parser(text).ParseDocument(); }

}  // namespace hetps::bench
