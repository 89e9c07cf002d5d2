// The JSON writer (see numarena/ops/json.hpp).
#include "numarena/ops/json.hpp"

#include <cassert>
#include <charconv>
#include <cmath>
#include <ostream>

namespace numarena {
namespace {

// Length of the well-formed UTF-8 sequence at the start of `s` (1..4), or 0 when it is
// ill-formed; then *bad receives the length of its maximal ill-formed prefix (at least 1),
// the bytes one U+FFFD replaces. The ranges are Unicode's table 3-7: no overlong forms (C0,
// C1, E0 80..9F, F0 80..8F), no surrogates (ED A0..BF), nothing above U+10FFFF (F4 90..,
// F5..FF).
std::size_t Utf8Sequence(std::string_view s, std::size_t* bad) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char lead = byte(0);
  std::size_t length = 0;
  unsigned char second_low = 0x80, second_high = 0xBF;
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) second_low = 0xA0;
    if (lead == 0xED) second_high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) second_low = 0x90;
    if (lead == 0xF4) second_high = 0x8F;
  } else {
    *bad = 1;
    return 0;
  }
  for (std::size_t i = 1; i < length; ++i) {
    const unsigned char low = i == 1 ? second_low : 0x80;
    const unsigned char high = i == 1 ? second_high : 0xBF;
    if (i >= s.size() || byte(i) < low || byte(i) > high) {
      *bad = i;
      return 0;
    }
  }
  return length;
}

}  // namespace

void JsonWriter::Write(std::string_view text) {
  if (string_ != nullptr) {
    string_->append(text);
  } else {
    stream_->write(text.data(), static_cast<std::streamsize>(text.size()));
  }
}

void JsonWriter::WriteQuoted(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  Write("\"");
  std::size_t plain = 0;  // start of the run of bytes that need no escape
  std::size_t i = 0;
  auto flush = [&] {
    if (i > plain) Write(s.substr(plain, i - plain));
  };
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    std::size_t step = 1;
    const char* escape = nullptr;
    char unicode[7];
    if (c == '"') {
      escape = "\\\"";
    } else if (c == '\\') {
      escape = "\\\\";
    } else if (c < 0x20) {
      switch (c) {
        case '\b':
          escape = "\\b";
          break;
        case '\f':
          escape = "\\f";
          break;
        case '\n':
          escape = "\\n";
          break;
        case '\r':
          escape = "\\r";
          break;
        case '\t':
          escape = "\\t";
          break;
        default:
          unicode[0] = '\\';
          unicode[1] = 'u';
          unicode[2] = '0';
          unicode[3] = '0';
          unicode[4] = kHex[c >> 4];
          unicode[5] = kHex[c & 0xF];
          unicode[6] = '\0';
          escape = unicode;
      }
    } else if (c >= 0x80) {
      std::size_t bad = 0;
      step = Utf8Sequence(s.substr(i), &bad);
      if (step == 0) {
        step = bad;
        escape = "\\ufffd";
      }
    }
    if (escape != nullptr) {
      flush();
      Write(escape);
      plain = i + step;
    }
    i += step;
  }
  flush();
  Write("\"");
}

void JsonWriter::Misuse(const char* what) {
  assert(false && what);
  (void)what;
  misused_ = true;
}

void JsonWriter::Separate() {
  if (scopes_.empty()) return;
  if (!scopes_.back().first) Write(",");
  scopes_.back().first = false;
}

void JsonWriter::BeforeValue() {
  if (scopes_.empty()) {
    if (wrote_top_level_) Misuse("a JSON document has one top-level value");
    wrote_top_level_ = true;
  } else if (scopes_.back().is_object) {
    if (!key_pending_) {
      Misuse("a value inside an object needs a Key() first");
      Separate();
    }
    key_pending_ = false;
  } else {
    Separate();
  }
}

JsonWriter& JsonWriter::Open(char bracket, bool is_object) {
  BeforeValue();
  Write(std::string_view(&bracket, 1));
  scopes_.push_back(Scope{is_object});
  return *this;
}

JsonWriter& JsonWriter::Close(char bracket, bool is_object) {
  if (scopes_.empty() || scopes_.back().is_object != is_object || key_pending_) {
    Misuse("End does not match the innermost Begin, or a Key() has no value");
    if (scopes_.empty()) return *this;
  }
  key_pending_ = false;
  scopes_.pop_back();
  Write(std::string_view(&bracket, 1));
  return *this;
}

JsonWriter& JsonWriter::BeginObject() { return Open('{', true); }
JsonWriter& JsonWriter::EndObject() { return Close('}', true); }
JsonWriter& JsonWriter::BeginArray() { return Open('[', false); }
JsonWriter& JsonWriter::EndArray() { return Close(']', false); }

JsonWriter& JsonWriter::Key(std::string_view name) {
  if (scopes_.empty() || !scopes_.back().is_object || key_pending_) {
    Misuse("Key() belongs directly inside an object, once per value");
  }
  Separate();
  WriteQuoted(name);
  Write(":");
  key_pending_ = true;
  return *this;
}

JsonWriter& JsonWriter::String(std::string_view value) {
  BeforeValue();
  WriteQuoted(value);
  return *this;
}

JsonWriter& JsonWriter::Int(std::int64_t value) {
  BeforeValue();
  char buffer[24];
  auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  Write(std::string_view(buffer, static_cast<std::size_t>(result.ptr - buffer)));
  return *this;
}

JsonWriter& JsonWriter::Uint(std::uint64_t value) {
  BeforeValue();
  char buffer[24];
  auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  Write(std::string_view(buffer, static_cast<std::size_t>(result.ptr - buffer)));
  return *this;
}

JsonWriter& JsonWriter::Double(double value) {
  if (!std::isfinite(value)) return Null();
  BeforeValue();
  // The shortest round-trip form of a double is at most 24 characters
  // ("-2.2250738585072014e-308").
  char buffer[32];
  auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  Write(std::string_view(buffer, static_cast<std::size_t>(result.ptr - buffer)));
  return *this;
}

JsonWriter& JsonWriter::Bool(bool value) {
  BeforeValue();
  Write(value ? "true" : "false");
  return *this;
}

JsonWriter& JsonWriter::Null() {
  BeforeValue();
  Write("null");
  return *this;
}

JsonWriter& JsonWriter::IntArray(std::span<const int> values) {
  BeginArray();
  for (int v : values) Int(v);
  return EndArray();
}

}  // namespace numarena
