// The one place numbers are formatted for people (see numarena/format.hpp).
#include "numarena/format.hpp"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace numarena {

std::string FormatBytes(std::uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 5) {
    value /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

std::string FormatPercent(double fraction) { return absl::StrFormat("%.1f%%", fraction * 100); }

std::string FormatIdList(std::span<const int> ids) {
  std::vector<int> sorted(ids.begin(), ids.end());
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  std::string out;
  for (std::size_t i = 0; i < sorted.size();) {
    std::size_t j = i;
    while (j + 1 < sorted.size() &&
           static_cast<long>(sorted[j + 1]) == static_cast<long>(sorted[j]) + 1)
      ++j;
    if (!out.empty()) out += ",";
    absl::StrAppend(&out, sorted[i]);
    if (j > i) absl::StrAppend(&out, "-", sorted[j]);
    i = j + 1;
  }
  return out;
}

StatusOr<std::uint64_t> ParseByteSize(std::string_view text) {
  auto invalid = [&](std::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "byte size '", absl::string_view(text.data(), text.size()), "': ",
        absl::string_view(why.data(), why.size()),
        " (expected digits with an optional K, M, G, T or P suffix, e.g. 64K or 2MiB)"));
  };
  std::size_t digits = 0;
  std::uint64_t value = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') {
    const std::uint64_t digit = static_cast<std::uint64_t>(text[digits] - '0');
    if (value > (UINT64_MAX - digit) / 10) return invalid("too large");
    value = value * 10 + digit;
    ++digits;
  }
  if (digits == 0) return invalid("no digits");
  std::string suffix;
  for (char c : text.substr(digits)) {
    suffix += static_cast<char>(c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c);
  }
  static constexpr struct {
    const char* name;
    unsigned shift;
  } kSuffixes[] = {{"", 0},     {"B", 0},    {"K", 10},   {"KB", 10},  {"KIB", 10},
                   {"M", 20},   {"MB", 20},  {"MIB", 20}, {"G", 30},   {"GB", 30},
                   {"GIB", 30}, {"T", 40},   {"TB", 40},  {"TIB", 40}, {"P", 50},
                   {"PB", 50},  {"PIB", 50}};
  for (const auto& known : kSuffixes) {
    if (suffix != known.name) continue;
    if (known.shift != 0 && value > (UINT64_MAX >> known.shift)) return invalid("too large");
    return value << known.shift;
  }
  return invalid("unknown suffix");
}

}  // namespace numarena
