// numarena's one JSON writer: every JSON document numarena produces (the CLI's --json
// output, the bandwidth matrix, the decode table) is written through it, so strings, numbers
// and layout follow the same rules everywhere.
//
// It writes compact JSON (no spaces, no newlines) to a std::string or a std::ostream,
// inserting the commas itself, so a caller describes its document as a sequence of calls and
// cannot emit a missing or trailing comma:
//
//   std::string text;
//   numarena::JsonWriter json(text);
//   json.BeginObject();
//   json.Key("nodes").BeginArray().Int(0).Int(1).EndArray();
//   json.Key("gpu").Null();
//   json.EndObject();   // text == R"({"nodes":[0,1],"gpu":null})"
//
// The output is always valid RFC 8259 JSON in UTF-8, whatever bytes a string holds:
//   - '"' and '\' are escaped as \" and \\;
//   - control characters (U+0000..U+001F) as \b \f \n \r \t where JSON has a short form,
//     otherwise as \u00XX (lowercase hex); every other character is written as it is;
//   - bytes that are not well-formed UTF-8 (a stray continuation byte, a truncated or overlong
//     sequence, a surrogate, a value above U+10FFFF; Unicode's table 3-7) are replaced, one
//     maximal ill-formed subsequence at a time, by \ufffd (U+FFFD REPLACEMENT CHARACTER), so
//     a file name or device string read from a hostile tree cannot make the document invalid;
//   - doubles are written in the shortest form that reads back to the same value
//     (std::to_chars); NaN and the infinities, which JSON cannot represent, as null.
//
// Misuse (a value inside an object without a Key(), a Key() outside an object, an End that
// does not match its Begin, a second top-level value) is a programming error: it fails an
// assert() in debug builds, and in every build it makes complete() false for good.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace numarena {

class JsonWriter {
 public:
  // Appends to `out` (which is not cleared).
  explicit JsonWriter(std::string& out) : string_(&out) {}
  // Writes to `out` as it goes; the caller flushes.
  explicit JsonWriter(std::ostream& out) : stream_(&out) {}
  JsonWriter(const JsonWriter&) = delete;
  JsonWriter& operator=(const JsonWriter&) = delete;

  JsonWriter& BeginObject();
  JsonWriter& EndObject();
  JsonWriter& BeginArray();
  JsonWriter& EndArray();

  // The name of the next member of the enclosing object (escaped like String()).
  JsonWriter& Key(std::string_view name);

  JsonWriter& String(std::string_view value);
  JsonWriter& Int(std::int64_t value);
  JsonWriter& Uint(std::uint64_t value);
  // Shortest round-trip form; null when `value` is NaN or infinite.
  JsonWriter& Double(double value);
  JsonWriter& Bool(bool value);
  JsonWriter& Null();
  // An array of integers: [0,1,2].
  JsonWriter& IntArray(std::span<const int> values);

  // True once exactly one top-level value is complete and no call was misused.
  bool complete() const { return scopes_.empty() && wrote_top_level_ && !misused_; }

 private:
  struct Scope {
    bool is_object;
    bool first = true;
  };

  void Write(std::string_view text);
  void WriteQuoted(std::string_view text);
  void Separate();
  void BeforeValue();
  void Misuse(const char* what);
  JsonWriter& Open(char bracket, bool is_object);
  JsonWriter& Close(char bracket, bool is_object);

  std::string* string_ = nullptr;
  std::ostream* stream_ = nullptr;
  std::vector<Scope> scopes_;
  bool key_pending_ = false;
  bool wrote_top_level_ = false;
  bool misused_ = false;
};

}  // namespace numarena
