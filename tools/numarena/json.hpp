// A minimal streaming JSON writer for the `numarena` subcommands' `--json` output.
//
// It writes compact JSON (one line, no spaces) straight to a std::ostream, inserting the
// commas itself, so a command describes its object as a sequence of calls and cannot emit
// a missing or trailing comma. Strings are escaped per RFC 8259 (quotes, backslash,
// control characters; other bytes, including UTF-8, pass through). Non-finite doubles are
// written as null, since JSON has no NaN or infinity.
//
//   numarena::cli::JsonWriter json(std::cout);
//   json.BeginObject();
//   json.Key("nodes").BeginArray().Int(0).Int(1).EndArray();
//   json.Key("gpu").Null();
//   json.EndObject();   // {"nodes":[0,1],"gpu":null}
//
// Misuse (a value where a key is due, unbalanced Begin/End) is a programming error and is
// caught by assert() in debug builds.
#pragma once

#include <cassert>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <span>
#include <string_view>
#include <vector>

namespace numarena::cli {

class JsonWriter {
 public:
  explicit JsonWriter(std::ostream& out) : out_(out) {}

  JsonWriter& BeginObject() { return Open('{', true); }
  JsonWriter& EndObject() { return Close('}', true); }
  JsonWriter& BeginArray() { return Open('[', false); }
  JsonWriter& EndArray() { return Close(']', false); }

  // The name of the next member of the enclosing object.
  JsonWriter& Key(std::string_view name) {
    assert(!scopes_.empty() && scopes_.back().is_object && !key_pending_);
    Separate();
    WriteString(name);
    out_ << ':';
    key_pending_ = true;
    return *this;
  }

  JsonWriter& String(std::string_view value) {
    BeforeValue();
    WriteString(value);
    return *this;
  }
  JsonWriter& Int(std::int64_t value) {
    BeforeValue();
    out_ << value;
    return *this;
  }
  JsonWriter& Uint(std::uint64_t value) {
    BeforeValue();
    out_ << value;
    return *this;
  }
  JsonWriter& Double(double value) {
    if (!std::isfinite(value)) return Null();
    BeforeValue();
    char buffer[32];
    auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
    out_.write(buffer, result.ptr - buffer);
    return *this;
  }
  JsonWriter& Bool(bool value) {
    BeforeValue();
    out_ << (value ? "true" : "false");
    return *this;
  }
  JsonWriter& Null() {
    BeforeValue();
    out_ << "null";
    return *this;
  }
  // An array of integers: [0,1,2].
  JsonWriter& IntArray(std::span<const int> values) {
    BeginArray();
    for (int v : values) Int(v);
    return EndArray();
  }

  // True once the outermost value is complete.
  bool done() const { return scopes_.empty() && wrote_top_level_; }

 private:
  struct Scope {
    bool is_object;
    bool first = true;
  };

  void Separate() {
    if (scopes_.empty()) return;
    if (!scopes_.back().first) out_ << ',';
    scopes_.back().first = false;
  }

  void BeforeValue() {
    if (scopes_.empty()) {
      assert(!wrote_top_level_ && "only one top-level value");
      wrote_top_level_ = true;
    } else if (scopes_.back().is_object) {
      assert(key_pending_ && "a value inside an object needs a Key() first");
      key_pending_ = false;
    } else {
      Separate();
    }
  }

  JsonWriter& Open(char bracket, bool is_object) {
    BeforeValue();
    out_ << bracket;
    scopes_.push_back(Scope{is_object});
    return *this;
  }

  JsonWriter& Close(char bracket, bool is_object) {
    assert(!scopes_.empty() && scopes_.back().is_object == is_object && !key_pending_);
    (void)is_object;
    scopes_.pop_back();
    out_ << bracket;
    return *this;
  }

  void WriteString(std::string_view s) {
    static constexpr char kHex[] = "0123456789abcdef";
    out_ << '"';
    for (char c : s) {
      switch (c) {
        case '"':
          out_ << "\\\"";
          break;
        case '\\':
          out_ << "\\\\";
          break;
        case '\n':
          out_ << "\\n";
          break;
        case '\r':
          out_ << "\\r";
          break;
        case '\t':
          out_ << "\\t";
          break;
        default:
          if (static_cast<unsigned char>(c) < 0x20) {
            out_ << "\\u00" << kHex[(c >> 4) & 0xf] << kHex[c & 0xf];
          } else {
            out_ << c;
          }
      }
    }
    out_ << '"';
  }

  std::ostream& out_;
  std::vector<Scope> scopes_;
  bool key_pending_ = false;
  bool wrote_top_level_ = false;
};

}  // namespace numarena::cli
