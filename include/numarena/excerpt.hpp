// Excerpt: a caller's text quoted back in an error message, cut to a readable length. A
// malformed value can be any size (an environment variable of 100 KB); the message must still
// be one readable line, so it shows the start and says how long the whole was.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/strings/string_view.h"

namespace numarena {

// `text` when it has at most `max_bytes` bytes, else its first `max_bytes` bytes followed by
// "... (N bytes)".
inline std::string Excerpt(std::string_view text, std::size_t max_bytes = 80) {
  if (text.size() <= max_bytes) return std::string(text);
  return std::string(text.substr(0, max_bytes)) + "... (" + std::to_string(text.size()) +
         " bytes)";
}

inline std::string Excerpt(const char* text, std::size_t max_bytes = 80) {
  return Excerpt(std::string_view(text), max_bytes);
}
inline std::string Excerpt(const std::string& text, std::size_t max_bytes = 80) {
  return Excerpt(std::string_view(text), max_bytes);
}

#ifndef ABSL_USES_STD_STRING_VIEW
inline std::string Excerpt(absl::string_view text, std::size_t max_bytes = 80) {
  return Excerpt(std::string_view(text.data(), text.size()), max_bytes);
}
#endif

}  // namespace numarena
