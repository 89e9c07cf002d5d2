// Small text helpers shared by the pure parsers of kernel files (topology_parse.cpp,
// ops_parse.cpp): whitespace, digits, trimming, overflow-checked decimal and hex numbers,
// tokens and lines, and quoting a bounded piece of untrusted input for an error message, so
// a huge or binary input cannot make a huge message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "numarena/status.hpp"

namespace numarena::parse::text {

// Debian's Abseil has its own string_view; this converts without copying.
inline absl::string_view Abs(std::string_view s) { return absl::string_view(s.data(), s.size()); }

inline bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}
inline bool IsDigit(char c) { return c >= '0' && c <= '9'; }

inline std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

// 'text' shortened to 40 characters, newlines as \n and other bytes outside printable
// ASCII as \xNN.
inline std::string Quote(std::string_view s) {
  constexpr std::size_t kMax = 40;
  std::string out = "'";
  for (std::size_t i = 0; i < s.size() && i < kMax; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c >= 0x7f) {
      out += absl::StrCat("\\x", absl::Hex(c, absl::kZeroPad2));
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > kMax) out += "...";
  out += "'";
  return out;
}

// InvalidArgument "<what>: <detail>".
inline Status Invalid(std::string_view what, const std::string& detail) {
  return absl::InvalidArgumentError(absl::StrCat(Abs(what), ": ", detail));
}

// Decimal digits only (no sign, no spaces), at most `max`.
inline StatusOr<std::uint64_t> Decimal(std::string_view s, std::uint64_t max,
                                       std::string_view what) {
  if (s.empty()) return Invalid(what, "expected a decimal number, found nothing");
  std::uint64_t value = 0;
  for (char c : s) {
    if (!IsDigit(c)) {
      return Invalid(what, absl::StrCat("expected a decimal number, found ", Quote(s)));
    }
    auto digit = static_cast<std::uint64_t>(c - '0');
    if (value > (max - digit) / 10) {
      return Invalid(what, absl::StrCat(Quote(s), " exceeds the limit ", max));
    }
    value = value * 10 + digit;
  }
  return value;
}

// Decimal digits only (no sign, no spaces), at most `max`, into `*out`: Decimal without its
// message, for parsers that must not allocate. False for anything else.
inline bool DecimalNoAlloc(std::string_view s, std::uint64_t max, std::uint64_t* out) noexcept {
  if (s.empty()) return false;
  std::uint64_t value = 0;
  for (char c : s) {
    if (!IsDigit(c)) return false;
    auto digit = static_cast<std::uint64_t>(c - '0');
    if (value > (max - digit) / 10) return false;
    value = value * 10 + digit;
  }
  *out = value;
  return true;
}

// 1 to 16 hex digits (no prefix), at most `max`.
inline StatusOr<std::uint64_t> HexDigits(std::string_view s, std::uint64_t max,
                                         std::string_view what) {
  if (s.empty() || s.size() > 16) {
    return Invalid(what, absl::StrCat("expected 1 to 16 hex digits, found ", Quote(s)));
  }
  std::uint64_t value = 0;
  for (char c : s) {
    int digit;
    if (IsDigit(c)) {
      digit = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      digit = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      digit = c - 'A' + 10;
    } else {
      return Invalid(what, absl::StrCat("bad hex digit in ", Quote(s)));
    }
    if (value > (max - static_cast<std::uint64_t>(digit)) / 16) {
      return Invalid(what, absl::StrCat(Quote(s), " exceeds 0x", absl::Hex(max)));
    }
    value = value * 16 + static_cast<std::uint64_t>(digit);
  }
  return value;
}

// Whitespace-separated tokens.
inline std::vector<std::string_view> Tokens(std::string_view s) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && IsSpace(s[i])) ++i;
    std::size_t start = i;
    while (i < s.size() && !IsSpace(s[i])) ++i;
    if (i > start) out.push_back(s.substr(start, i - start));
  }
  return out;
}

// Calls fn(piece) for each piece of `s` between `sep`s, empty pieces included.
template <typename Fn>
void ForEachPiece(std::string_view s, char sep, Fn&& fn) {
  std::size_t start = 0;
  for (;;) {
    std::size_t end = s.find(sep, start);
    if (end == std::string_view::npos) {
      fn(s.substr(start));
      return;
    }
    fn(s.substr(start, end - start));
    start = end + 1;
  }
}

}  // namespace numarena::parse::text
