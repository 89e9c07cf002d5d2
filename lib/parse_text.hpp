// Small text helpers shared by the pure parsers of kernel files (topology_parse.cpp,
// ops_parse.cpp): whitespace, digits, trimming, and quoting a bounded piece of untrusted
// input for an error message, so a huge or binary input cannot make a huge message.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

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

}  // namespace numarena::parse::text
