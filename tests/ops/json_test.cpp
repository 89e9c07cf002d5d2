// numarena's JSON writer: the exact text it writes, and that whatever it is given comes out
// as JSON a strict RFC 8259 parser (tests/support/json_check.hpp: UTF-8 checked, \u escapes
// decoded) reads back to the same strings and numbers.
#include "numarena/ops/json.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "json_check.hpp"

namespace {

using numarena::JsonWriter;
using numarena::testing::ParseJson;

// `value` as a one-string document.
std::string Quoted(std::string_view value) {
  std::string out;
  JsonWriter(out).String(value);
  return out;
}

// The string `value` reads back as, after writing it as a key and as a value.
std::string RoundTrip(std::string_view value) {
  std::string out;
  JsonWriter json(out);
  json.BeginObject().Key(value).String(value).EndObject();
  REQUIRE(json.complete());
  auto doc = ParseJson(out);
  INFO(out);
  REQUIRE(doc.has_value());
  REQUIRE(doc->object.size() == 1);
  REQUIRE(doc->object.begin()->first == doc->object.begin()->second.string);
  return doc->object.begin()->second.string;
}

const std::string kReplacement = "\xEF\xBF\xBD";  // U+FFFD in UTF-8

TEST_CASE("json: structure, commas and keys", "[json]") {
  std::string out;
  JsonWriter json(out);
  json.BeginObject();
  json.Key("nodes").BeginArray().Int(0).Int(1).EndArray();
  json.Key("empty").BeginArray().EndArray();
  json.Key("inner").BeginObject().Key("a").Bool(true).Key("b").Bool(false).EndObject();
  json.Key("none").BeginObject().EndObject();
  json.Key("gpu").Null();
  const int ids[] = {3, -1, 7};
  json.Key("ids").IntArray(ids);
  json.Key("list").BeginArray().BeginObject().EndObject().String("x").Null().EndArray();
  REQUIRE_FALSE(json.complete());
  json.EndObject();
  REQUIRE(json.complete());
  REQUIRE(out == R"({"nodes":[0,1],"empty":[],"inner":{"a":true,"b":false},"none":{},"gpu":null,)"
                 R"("ids":[3,-1,7],"list":[{},"x",null]})");
  REQUIRE(ParseJson(out).has_value());
}

TEST_CASE("json: a stream and a string receive the same text", "[json]") {
  auto write = [](JsonWriter& json) {
    json.BeginArray().String("a\"b\n\x01\xff").Double(0.5).Uint(7).EndArray();
    REQUIRE(json.complete());
  };
  std::string text;
  JsonWriter to_string(text);
  write(to_string);
  std::ostringstream stream;
  JsonWriter to_stream(stream);
  write(to_stream);
  REQUIRE(text == stream.str());
  REQUIRE(text == R"(["a\"b\n\u0001\ufffd",0.5,7])");
}

TEST_CASE("json: quotes, backslashes and every control character are escaped", "[json]") {
  REQUIRE(Quoted("") == R"("")");
  REQUIRE(Quoted("plain / text ~\x7f") == "\"plain / text ~\x7f\"");
  REQUIRE(Quoted("say \"hi\"") == R"("say \"hi\"")");
  REQUIRE(Quoted("C:\\dir\\") == R"("C:\\dir\\")");
  REQUIRE(Quoted("\b\f\n\r\t") == R"("\b\f\n\r\t")");
  REQUIRE(Quoted(std::string_view("\0", 1)) == R"("\u0000")");
  REQUIRE(Quoted("\x01\x1b\x1f") == R"("\u0001\u001b\u001f")");
  for (int c = 0; c < 0x20; ++c) {
    const std::string one(1, static_cast<char>(c));
    INFO(c);
    const std::string quoted = Quoted(one);
    // Nothing below U+0020 appears raw, and each reads back as itself.
    for (char q : quoted) REQUIRE(static_cast<unsigned char>(q) >= 0x20);
    REQUIRE(RoundTrip(one) == one);
  }
}

TEST_CASE("json: well-formed UTF-8 passes through unchanged", "[json]") {
  const std::vector<std::string> texts = {
      "caf\xC3\xA9",                       // U+00E9
      "\xC2\x80\xDF\xBF",                  // U+0080, U+07FF: the 2-byte range's ends
      "\xE0\xA0\x80\xEF\xBF\xBF",          // U+0800, U+FFFF
      "\xED\x9F\xBF\xEE\x80\x80",          // U+D7FF, U+E000: either side of the surrogates
      "\xF0\x90\x80\x80\xF4\x8F\xBF\xBF",  // U+10000, U+10FFFF
      "GPU \xE2\x80\x94 H100 \xF0\x9F\x9A\x80",
  };
  for (const std::string& text : texts) {
    INFO(text);
    REQUIRE(Quoted(text) == "\"" + text + "\"");
    REQUIRE(RoundTrip(text) == text);
  }
}

TEST_CASE("json: ill-formed UTF-8 becomes U+FFFD, one per maximal ill-formed subsequence",
          "[json]") {
  struct Case {
    std::string in;
    std::string out;  // what the parser reads back
  };
  const std::string R = kReplacement;
  const std::vector<Case> cases = {
      {"\x80", R},  // a stray continuation byte
      {"a\xBF"
       "b",
       "a" + R + "b"},                      // ... between ASCII
      {"\xC0\xAF", R + R},                  // overlong '/': C0 is never a lead byte
      {"\xC1\xBF", R + R},                  // C1 neither
      {"\xE0\x80\x80", R + R + R},          // overlong 3-byte form
      {"\xED\xA0\x80", R + R + R},          // a UTF-16 surrogate (U+D800)
      {"\xF0\x80\x80\x80", R + R + R + R},  // overlong 4-byte form
      {"\xF4\x90\x80\x80", R + R + R + R},  // above U+10FFFF
      {"\xF5\x80", R + R},                  // F5..FF are never lead bytes
      {"\xFF\xFE", R + R},                  //
      {"\xE2\x82", R},                      // truncated at the end: one for the prefix
      {"\xE2\x82"
       "A",
       R + "A"},  // truncated before ASCII
      {"\xF0\x9F\x98"
       "x",
       R + "x"},                                     // a 4-byte sequence missing its last byte
      {"\xC3", R},                                   // a lone lead byte at the end
      {"ok\xC3\xA9\xC3", "ok\xC3\xA9" + R},          // valid, then truncated
      {"\xE2\x82\xE2\x82\xAC", R + "\xE2\x82\xAC"},  // truncated, then a whole euro sign
  };
  for (const Case& c : cases) {
    INFO(Quoted(c.in));
    REQUIRE(RoundTrip(c.in) == c.out);
  }
  REQUIRE(Quoted("\xE2\x82"
                 "A") == R"("\ufffdA")");
}

TEST_CASE("json: any bytes at all give a document that parses", "[json]") {
  std::mt19937_64 random(20250131);
  std::uniform_int_distribution<int> length(0, 24);
  std::uniform_int_distribution<int> byte(0, 255);
  // Bias toward the bytes that matter: controls, quotes, backslashes and UTF-8 lead and
  // continuation bytes.
  const unsigned char interesting[] = {0x00, 0x1F, '"',  '\\', 0x7F, 0x80, 0xBF, 0xC0, 0xC2,
                                       0xDF, 0xE0, 0xED, 0xEF, 0xF0, 0xF4, 0xF5, 0xFF, 'a'};
  for (int i = 0; i < 20000; ++i) {
    std::string text;
    const int n = length(random);
    for (int j = 0; j < n; ++j) {
      const int b = byte(random);
      text += static_cast<char>(b < 128 ? interesting[b % sizeof interesting] : b);
    }
    std::string out;
    JsonWriter json(out);
    json.BeginArray().String(text).EndArray();
    auto doc = ParseJson(out);
    INFO(out);
    REQUIRE(doc.has_value());
  }
}

TEST_CASE("json: numbers", "[json]") {
  std::string out;
  JsonWriter json(out);
  json.BeginArray();
  json.Int(std::numeric_limits<std::int64_t>::min()).Int(std::numeric_limits<std::int64_t>::max());
  json.Uint(std::numeric_limits<std::uint64_t>::max()).Uint(0);
  json.Double(0.1).Double(2.5).Double(1e21).Double(-3e-300).Double(4096.0);
  json.Double(std::nan("")).Double(INFINITY).Double(-INFINITY);
  json.EndArray();
  REQUIRE(out ==
          "[-9223372036854775808,9223372036854775807,18446744073709551615,0,0.1,2.5,1e+21,"
          "-3e-300,4096,null,null,null]");
  REQUIRE(ParseJson(out).has_value());
}

TEST_CASE("json: doubles read back exactly", "[json]") {
  std::mt19937_64 random(7);
  for (int i = 0; i < 5000; ++i) {
    double value;
    const std::uint64_t bits = random();
    static_assert(sizeof value == sizeof bits);
    std::memcpy(&value, &bits, sizeof value);
    if (!std::isfinite(value)) continue;
    std::string out;
    JsonWriter(out).Double(value);
    auto doc = ParseJson(out);
    INFO(out);
    REQUIRE(doc.has_value());
    REQUIRE(doc->is_number());
    REQUIRE(std::strtod(out.c_str(), nullptr) == value);
  }
}

#ifdef NDEBUG  // debug builds stop at the assert instead
TEST_CASE("json: misuse is reported by complete()", "[json]") {
  auto misused = [](auto&& write) {
    std::string out;
    JsonWriter json(out);
    write(json);
    return !json.complete();
  };
  REQUIRE(misused([](JsonWriter& j) { j.BeginObject().Int(1).EndObject(); }));  // no key
  REQUIRE(misused([](JsonWriter& j) { j.BeginArray().Key("k").Int(1).EndArray(); }));
  REQUIRE(misused([](JsonWriter& j) { j.BeginObject().Key("k").EndObject(); }));  // no value
  REQUIRE(misused([](JsonWriter& j) { j.BeginObject().EndArray(); }));
  REQUIRE(misused([](JsonWriter& j) { j.Int(1).Int(2); }));  // two top-level values
  REQUIRE(misused([](JsonWriter& j) { j.EndArray(); }));
  REQUIRE(misused([](JsonWriter& j) { j.BeginArray(); }));  // never closed
  REQUIRE_FALSE(misused([](JsonWriter& j) { j.BeginObject().Key("k").Int(1).EndObject(); }));
}
#endif

}  // namespace
