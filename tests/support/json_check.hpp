// A small strict JSON parser for tests that check a program's JSON output is well-formed
// and complete (RFC 8259: objects, arrays, strings with escapes, numbers, true/false/null;
// no trailing commas, no comments, nothing after the value, UTF-8 only). \uXXXX escapes,
// surrogate pairs included, are decoded to UTF-8, so strings read back exactly as written.
//
//   auto doc = numarena::testing::ParseJson(text);
//   REQUIRE(doc.has_value());
//   REQUIRE(doc->at("rows").array.size() == 2);
#pragma once

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace numarena::testing {

struct JsonValue {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  bool boolean = false;
  double number = 0;
  std::string string;
  std::vector<JsonValue> array;
  std::map<std::string, JsonValue> object;

  bool has(const std::string& key) const { return kind == Kind::kObject && object.count(key) != 0; }
  // The member `key`; a null value when absent (so chained lookups fail the test, not crash).
  const JsonValue& at(const std::string& key) const {
    static const JsonValue null_value;
    auto it = object.find(key);
    return it == object.end() ? null_value : it->second;
  }
  bool is_number() const { return kind == Kind::kNumber; }
};

namespace json_detail {

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  std::optional<JsonValue> Document() {
    auto value = Value(0);
    SkipSpace();
    if (!value || pos_ != text_.size()) return std::nullopt;
    return value;
  }

 private:
  void SkipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' ||
                                   text_[pos_] == '\r' || text_[pos_] == '\t')) {
      ++pos_;
    }
  }
  bool Consume(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  std::optional<JsonValue> Value(int depth) {
    if (depth > 64) return std::nullopt;
    SkipSpace();
    if (pos_ >= text_.size()) return std::nullopt;
    JsonValue v;
    char c = text_[pos_];
    if (c == '{') return Object(depth);
    if (c == '[') return Array(depth);
    if (c == '"') {
      auto s = String();
      if (!s) return std::nullopt;
      v.kind = JsonValue::Kind::kString;
      v.string = *s;
      return v;
    }
    if (Consume("true")) {
      v.kind = JsonValue::Kind::kBool;
      v.boolean = true;
      return v;
    }
    if (Consume("false")) {
      v.kind = JsonValue::Kind::kBool;
      return v;
    }
    if (Consume("null")) return v;
    return Number();
  }

  std::optional<JsonValue> Number() {
    const std::size_t begin = pos_;
    if (pos_ < text_.size() && text_[pos_] == '-') ++pos_;
    auto digits = [&] {
      std::size_t start = pos_;
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
      return pos_ - start;
    };
    if (pos_ < text_.size() && text_[pos_] == '0') {
      ++pos_;
    } else if (digits() == 0) {
      return std::nullopt;
    }
    if (pos_ < text_.size() && text_[pos_] == '.') {
      ++pos_;
      if (digits() == 0) return std::nullopt;
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      if (digits() == 0) return std::nullopt;
    }
    JsonValue v;
    v.kind = JsonValue::Kind::kNumber;
    v.number = std::strtod(std::string(text_.substr(begin, pos_ - begin)).c_str(), nullptr);
    return v;
  }

  std::optional<std::string> String() {
    if (!Consume("\"")) return std::nullopt;
    std::string out;
    while (pos_ < text_.size()) {
      char c = text_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) return std::nullopt;
      if (static_cast<unsigned char>(c) >= 0x80) {
        // RFC 8259 section 8.1: JSON text is UTF-8; an ill-formed sequence is not JSON.
        std::size_t length = Utf8Length(text_.substr(pos_ - 1));
        if (length == 0) return std::nullopt;
        out.append(text_.substr(pos_ - 1, length));
        pos_ += length - 1;
        continue;
      }
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= text_.size()) return std::nullopt;
      char e = text_[pos_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out += e;
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          auto unit = Hex4();
          if (!unit) return std::nullopt;
          std::uint32_t code = *unit;
          if (code >= 0xDC00 && code <= 0xDFFF) return std::nullopt;  // lone low surrogate
          if (code >= 0xD800 && code <= 0xDBFF) {                     // needs its low half
            if (!Consume("\\u")) return std::nullopt;
            auto low = Hex4();
            if (!low || *low < 0xDC00 || *low > 0xDFFF) return std::nullopt;
            code = 0x10000 + ((code - 0xD800) << 10) + (*low - 0xDC00);
          }
          AppendUtf8(out, code);
          break;
        }
        default:
          return std::nullopt;
      }
    }
    return std::nullopt;
  }

  std::optional<std::uint32_t> Hex4() {
    std::uint32_t value = 0;
    for (int i = 0; i < 4; ++i) {
      if (pos_ >= text_.size() || !std::isxdigit(static_cast<unsigned char>(text_[pos_]))) {
        return std::nullopt;
      }
      const char h = text_[pos_++];
      value = value * 16 + static_cast<std::uint32_t>(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
    }
    return value;
  }

  static void AppendUtf8(std::string& out, std::uint32_t code) {
    if (code < 0x80) {
      out += static_cast<char>(code);
    } else if (code < 0x800) {
      out += static_cast<char>(0xC0 | (code >> 6));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else if (code < 0x10000) {
      out += static_cast<char>(0xE0 | (code >> 12));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (code >> 18));
      out += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    }
  }

  // Length of the well-formed UTF-8 sequence `s` starts with, 0 when ill-formed (Unicode
  // table 3-7: no overlongs, no surrogates, nothing above U+10FFFF).
  static std::size_t Utf8Length(std::string_view s) {
    const auto b = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
    std::size_t length;
    unsigned char low = 0x80, high = 0xBF;
    if (b(0) >= 0xC2 && b(0) <= 0xDF) {
      length = 2;
    } else if (b(0) >= 0xE0 && b(0) <= 0xEF) {
      length = 3;
      if (b(0) == 0xE0) low = 0xA0;
      if (b(0) == 0xED) high = 0x9F;
    } else if (b(0) >= 0xF0 && b(0) <= 0xF4) {
      length = 4;
      if (b(0) == 0xF0) low = 0x90;
      if (b(0) == 0xF4) high = 0x8F;
    } else {
      return 0;
    }
    if (s.size() < length) return 0;
    for (std::size_t i = 1; i < length; ++i) {
      if (b(i) < (i == 1 ? low : 0x80) || b(i) > (i == 1 ? high : 0xBF)) return 0;
    }
    return length;
  }

  std::optional<JsonValue> Array(int depth) {
    ++pos_;  // '['
    JsonValue v;
    v.kind = JsonValue::Kind::kArray;
    SkipSpace();
    if (Consume("]")) return v;
    while (true) {
      auto element = Value(depth + 1);
      if (!element) return std::nullopt;
      v.array.push_back(std::move(*element));
      SkipSpace();
      if (Consume("]")) return v;
      if (!Consume(",")) return std::nullopt;
    }
  }

  std::optional<JsonValue> Object(int depth) {
    ++pos_;  // '{'
    JsonValue v;
    v.kind = JsonValue::Kind::kObject;
    SkipSpace();
    if (Consume("}")) return v;
    while (true) {
      SkipSpace();
      auto key = String();
      if (!key) return std::nullopt;
      SkipSpace();
      if (!Consume(":")) return std::nullopt;
      auto member = Value(depth + 1);
      if (!member) return std::nullopt;
      if (!v.object.emplace(*key, std::move(*member)).second) return std::nullopt;  // duplicate
      SkipSpace();
      if (Consume("}")) return v;
      if (!Consume(",")) return std::nullopt;
    }
  }

  std::string_view text_;
  std::size_t pos_ = 0;
};

}  // namespace json_detail

// The parsed document, or nullopt when `text` is not exactly one well-formed JSON value.
inline std::optional<JsonValue> ParseJson(std::string_view text) {
  return json_detail::Parser(text).Document();
}

}  // namespace numarena::testing
